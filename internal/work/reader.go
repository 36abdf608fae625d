package work

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fairwayhq/fairway/pkg/events"
)

// ErrStreamRead marks a direct-get that failed on the server's side.
var ErrStreamRead = errors.New("read PRODUCTS")

// Stored is one event read back from PRODUCTS.
type Stored struct {
	Seq     uint64
	Subject string
	Time    time.Time // when JetStream stored it (the publish time)
	Header  nats.Header
	Data    []byte
	// Bare: read without its headers (Reader.ReadItem of an item with
	// Times). Subject and Header are empty; Seq is known from the range
	// and Time, to the millisecond, from the item.
	Bare bool
}

// Batch is the answer to one Reader.Next call.
type Batch struct {
	Msgs []Stored
	// Pending is how many of the tenant's events remain after the last
	// message returned (as the server counted them).
	Pending uint64
	// LastSeq is the sequence of the last message returned, as the
	// server's end-of-batch reply names it (0: not told).
	LastSeq uint64
}

// Reader reads one tenant's events from PRODUCTS by sequence with batched
// direct gets ($JS.API.DIRECT.GET.<stream> with next_by_subj and batch): no
// consumer is created, so reading costs no server state per tenant. The
// stream must have AllowDirect (events.EnsureStream sets it).
type Reader struct {
	nc      *nats.Conn
	stream  string
	timeout time.Duration
	chunk   int           // events one direct get of ReadItem asks for: ReadChunk
	slots   chan struct{} // one per direct get of ReadItem in flight: ReadsInFlight; nil: no bound
	layout  atomic.Pointer[events.Layout]
}

// getPrealloc bounds the room one direct get's batch is allocated with
// before its replies arrive.
const getPrealloc = 1000

// ReaderTimeoutDefault bounds one direct-get exchange when ctx has no deadline.
const ReaderTimeoutDefault = 10 * time.Second

// NewReader returns a Reader on stream (default PRODUCTS).
func NewReader(nc *nats.Conn, stream string) *Reader {
	return &Reader{nc: nc, stream: cmp.Or(stream, events.StreamName), timeout: ReaderTimeoutDefault, chunk: ReadChunk,
		slots: make(chan struct{}, ReadsInFlight)}
}

// Stream is the name of the stream r reads.
func (r *Reader) Stream() string { return r.stream }

// Layout is the stream's partition layout (events.Layout), asked of the
// server once: a stream keeps the layout it was created with.
func (r *Reader) Layout(ctx context.Context) (events.Layout, error) {
	if l := r.layout.Load(); l != nil {
		return *l, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	l, err := events.StreamLayout(ctx, r.nc, r.stream)
	if err != nil {
		return events.Layout{}, fmt.Errorf("%w: %v", ErrStreamRead, err)
	}
	r.layout.Store(&l)
	return l, nil
}

// TenantSubjects is the filter of every stored event of tenant.
func (r *Reader) TenantSubjects(ctx context.Context, tenant string) (string, error) {
	return r.subjects(ctx, tenant, "")
}

type directGetRequest struct {
	Seq       uint64     `json:"seq,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
	NextFor   string     `json:"next_by_subj,omitempty"`
	Batch     int        `json:"batch,omitempty"`
	MaxBytes  int        `json:"max_bytes,omitempty"`
	NoHdr     bool       `json:"no_hdr,omitempty"`
	MultiLast []string   `json:"multi_last,omitempty"`
}

// ReadOptions shape one Next call.
type ReadOptions struct {
	Max      int  // most messages, default 500
	MaxBytes int  // stop after about this many bytes (0: server default)
	NoData   bool // headers only: sequences and subjects, no bodies (data is still sent by the server; NoData drops it client side)
	// Priority, when set, reads only the tenant's events of that priority
	// (events.Layout.PrioritySubjects); "" reads them all.
	Priority events.Priority
}

// subjects is the filter of tenant's stored events of priority p ("":
// all).
func (r *Reader) subjects(ctx context.Context, tenant string, p events.Priority) (string, error) {
	l, err := r.Layout(ctx)
	if err != nil {
		return "", err
	}
	if p == "" {
		return l.TenantSubjects(tenant)
	}
	return l.PrioritySubjects(tenant, p)
}

// Next returns up to opts.Max of tenant's events with sequence ≥ from and
// ≤ upTo (0: no upper bound), in order. An empty batch means none exist yet.
func (r *Reader) Next(ctx context.Context, tenant string, from, upTo uint64, opts ReadOptions) (Batch, error) {
	subj, err := r.subjects(ctx, tenant, opts.Priority)
	if err != nil {
		return Batch{}, err
	}
	dg := nextRequest(subj, from, upTo, cmp.Or(opts.Max, 500))
	dg.MaxBytes = opts.MaxBytes
	return r.get(ctx, "tenant "+tenant, dg, from, upTo, opts)
}

// nextRequest is the direct get of up to max events on subj with
// sequence ≥ from and ≤ upTo (0: no upper bound).
func nextRequest(subj string, from, upTo uint64, max int) directGetRequest {
	if upTo > 0 && upTo >= from && upTo-from+1 < uint64(max) {
		max = int(upTo - from + 1)
	}
	return directGetRequest{Seq: max64(from, 1), NextFor: subj, Batch: max}
}

// Pending counts tenant's events with sequence ≥ from.
func (r *Reader) Pending(ctx context.Context, tenant string, from uint64) (uint64, error) {
	return r.PendingOf(ctx, tenant, "", from)
}

// PendingOf counts tenant's events of priority p ("": all) with sequence
// ≥ from.
func (r *Reader) PendingOf(ctx context.Context, tenant string, p events.Priority, from uint64) (uint64, error) {
	b, err := r.Next(ctx, tenant, from, 0, ReadOptions{Max: 1, NoData: true, Priority: p})
	if err != nil || len(b.Msgs) == 0 {
		return 0, err
	}
	return 1 + b.Pending, nil
}

// Between counts tenant's events with sequence in [from, to): two counts,
// each one direct get.
func (r *Reader) Between(ctx context.Context, tenant string, from, to uint64) (uint64, error) {
	a, err := r.Pending(ctx, tenant, from)
	if err != nil {
		return 0, err
	}
	b, err := r.Pending(ctx, tenant, to)
	if err != nil {
		return 0, err
	}
	return a - min(a, b), nil
}

// OpSeqs returns the sequences of tenant's events of priority p ("":
// every priority) stored on op's subject with sequence in from..upTo, at
// most max of them per priority, in order: one batched direct get per
// priority on that one subject, which the server answers from its
// per-subject index.
func (r *Reader) OpSeqs(ctx context.Context, tenant string, op events.Op, p events.Priority, from, upTo uint64, max int) ([]uint64, error) {
	l, err := r.Layout(ctx)
	if err != nil {
		return nil, err
	}
	ps := []events.Priority{p}
	if p == "" {
		ps = events.Priorities
	}
	var seqs []uint64
	for _, p := range ps {
		subj, err := l.OpSubjects(tenant, op, p)
		if err != nil {
			return nil, err
		}
		b, err := r.get(ctx, "tenant "+tenant, nextRequest(subj, from, upTo, max), from, upTo, ReadOptions{NoData: true})
		if err != nil {
			return nil, err
		}
		for _, m := range b.Msgs {
			seqs = append(seqs, m.Seq)
		}
	}
	slices.Sort(seqs)
	return seqs, nil
}

// lastSeqBatch bounds the answer of LastSeq: a tenant has one subject per
// op and priority (events.StreamSubjects), six today.
const lastSeqBatch = 64

// LastSeq returns the sequence of tenant's last event of priority p ("":
// any) (0: none): one batched direct get of the last message on each of
// the tenant's subjects (multi_last), which the server answers from its
// per-subject state.
func (r *Reader) LastSeq(ctx context.Context, tenant string, p events.Priority) (uint64, error) {
	subj, err := r.subjects(ctx, tenant, p)
	if err != nil {
		return 0, err
	}
	b, err := r.get(ctx, "tenant "+tenant, directGetRequest{MultiLast: []string{subj}, Batch: lastSeqBatch}, 0, 0, ReadOptions{NoData: true})
	if err != nil {
		return 0, err
	}
	var last uint64
	for _, m := range b.Msgs {
		last = max(last, m.Seq)
	}
	return last, nil
}

// FirstAt returns tenant's first event stored at or after t; ok is false
// when there is none.
func (r *Reader) FirstAt(ctx context.Context, tenant string, t time.Time) (s Stored, ok bool, err error) {
	subj, err := r.TenantSubjects(ctx, tenant)
	if err != nil {
		return Stored{}, false, err
	}
	t = t.UTC()
	b, err := r.get(ctx, "tenant "+tenant, directGetRequest{StartTime: &t, NextFor: subj, Batch: 1}, 0, 0, ReadOptions{NoData: true})
	if err != nil || len(b.Msgs) == 0 {
		return Stored{}, false, err
	}
	return b.Msgs[0], true, nil
}

// FirstOn returns the sequence of the stream's first message at or after
// from on subject (a filter, such as a partition's); ok is false when
// there is none. The server walks the stream from from to the first match.
func (r *Reader) FirstOn(ctx context.Context, subject string, from uint64) (seq uint64, ok bool, err error) {
	b, err := r.get(ctx, "subject "+subject, directGetRequest{Seq: from, NextFor: subject, Batch: 1}, from, 0, ReadOptions{NoData: true})
	if err != nil || len(b.Msgs) == 0 {
		return 0, false, err
	}
	return b.Msgs[0].Seq, true, nil
}

// get runs one batched direct get and collects its replies; of names
// what it reads in its errors ("tenant acme", say).
func (r *Reader) get(ctx context.Context, of string, dg directGetRequest, from, upTo uint64, opts ReadOptions) (Batch, error) {
	max := dg.Batch
	req, _ := json.Marshal(dg)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	inbox := r.nc.NewRespInbox()
	ch := make(chan *nats.Msg, max+2)
	sub, err := r.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return Batch{}, fmt.Errorf("%w: subscribe: %v", ErrStreamRead, err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // best effort
	if err := r.nc.PublishRequest("$JS.API.DIRECT.GET."+r.stream, inbox, req); err != nil {
		return Batch{}, fmt.Errorf("%w: %v", ErrStreamRead, err)
	}
	var b Batch
	if max > 1 {
		b.Msgs = make([]Stored, 0, min(max, getPrealloc))
	}
	for {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return b, fmt.Errorf("%w: %s from %d: %v", ErrStreamRead, of, from, ctx.Err())
		case m = <-ch:
		}
		if len(m.Data) == 0 && m.Header != nil {
			switch status := m.Header.Get("Status"); status {
			case "204": // end of batch
				b.Pending, _ = strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				b.LastSeq, _ = strconv.ParseUint(m.Header.Get("Nats-Last-Sequence"), 10, 64)
				if dg.NoHdr {
					return b, nil // no sequences to trim by: the caller checks LastSeq
				}
				return trim(b, upTo), nil
			case "404": // nothing at or after from
				return b, nil
			case "408":
				return b, fmt.Errorf("%w: %s from %d: request timeout", ErrStreamRead, of, from)
			case "503":
				return b, fmt.Errorf("%w: no responders for %s (does the stream exist with allow_direct?)", ErrStreamRead, r.stream)
			case "":
				// a stored message without a body: fall through
			default:
				return b, fmt.Errorf("%w: status %s %s", ErrStreamRead, status, m.Header.Get("Description"))
			}
		}
		if dg.NoHdr && m.Header.Get("Nats-Sequence") == "" {
			b.Msgs = append(b.Msgs, Stored{Data: m.Data, Bare: true})
			continue
		}
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return b, fmt.Errorf("%w: reply without Nats-Sequence", ErrStreamRead)
		}
		ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get("Nats-Time-Stamp"))
		s := Stored{Seq: seq, Subject: m.Header.Get("Nats-Subject"), Time: ts, Header: m.Header}
		if !opts.NoData {
			s.Data = m.Data
		}
		b.Msgs = append(b.Msgs, s)
	}
}

// NextSeqFromLeader returns the sequence of tenant's first event at or
// after from as the stream's leader sees it; ok is false when there is none.
// It uses the STREAM.MSG.GET API, which only the leader answers: a direct
// get may be answered by a replica still catching up, so use this to tell
// "not there yet on that replica" from "gone".
func (r *Reader) NextSeqFromLeader(ctx context.Context, tenant string, from uint64) (seq uint64, ok bool, err error) {
	subj, err := r.TenantSubjects(ctx, tenant)
	if err != nil {
		return 0, false, err
	}
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	req, _ := json.Marshal(directGetRequest{Seq: max64(from, 1), NextFor: subj})
	m, err := r.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+r.stream, req)
	if err != nil {
		return 0, false, fmt.Errorf("%w: leader get of tenant %s from %d: %v", ErrStreamRead, tenant, from, err)
	}
	var resp struct {
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return 0, false, fmt.Errorf("%w: leader get of tenant %s from %d: %v", ErrStreamRead, tenant, from, err)
	}
	switch {
	case resp.Error != nil && resp.Error.Code == 404:
		return 0, false, nil
	case resp.Error != nil:
		return 0, false, fmt.Errorf("%w: leader get of tenant %s from %d: %d %s", ErrStreamRead, tenant, from, resp.Error.Code, resp.Error.Description)
	case resp.Message == nil:
		return 0, false, fmt.Errorf("%w: leader get of tenant %s from %d: empty answer", ErrStreamRead, tenant, from)
	}
	return resp.Message.Seq, true, nil
}

// trim drops messages past upTo; they are counted back into Pending.
func trim(b Batch, upTo uint64) Batch {
	if upTo == 0 {
		return b
	}
	for i, m := range b.Msgs {
		if m.Seq > upTo {
			b.Pending += uint64(len(b.Msgs) - i)
			b.Msgs = b.Msgs[:i]
			break
		}
	}
	return b
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
