package work

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/fairwayhq/fairway/pkg/events"
)

// ReadChunk bounds the events one direct get of ReadItem asks for, and
// ReadsInFlight a Reader's direct gets of ReadItem in flight at once: at
// most 4,000 events asked for and not yet received, however many workers
// a sink runs.
//
// Why bound them: the server stores each publish to a stream, acknowledges
// it and sends every direct-get reply from one loop per stream
// (nats-server's stream internalLoop), and a direct get holds off the
// stream's writes while it loads its events. So every event a sink has
// asked for and not yet received is queued ahead of other tenants'
// publishes. Smaller gets keep that queue short and cost read rate: 250
// per get keeps other tenants' publish acknowledgements short while a
// flood is read, at a few percent of the rate of whole-item gets. A bound
// below the sink's workers shortens the queue further but leaves items
// waiting to be read while they hold their slot leases, so 16 binds only
// sinks with more workers. docs/sinks.md ("Reading in chunks") and
// docs/benchmarks.md have the figures (BenchmarkPublishAckUnderReads).
const ReadChunk = 250

// ReadsInFlight: see ReadChunk.
const ReadsInFlight = 16

// ReadItem returns it's events: those of it.Tenant with sequences in
// it.FromSeq..it.ToSeq, in order, at most it.Count. It does not fail when
// the range holds fewer (the stream's limits removed some); the caller
// compares the length with it.Count.
//
// A dense item — Count equals the width of the range, as when one tenant
// published the whole range (a catalog import, a sync storm) — is read by
// sequence without a subject filter. The server then neither matches
// subjects message by message nor counts the tenant's pending events for
// every request (NumPending with a wildcard filter walks the stream's
// subject state, which costs more than reading 500 events). Messages of
// other subjects can only be in a dense range if the dispatcher miscounted;
// they are dropped here, so the result is what the filtered read returns.
//
// An item that lists its sequences (Item.Seqs: a batch spread over the
// stream) is read by lookups of its sequences, several at once, instead of
// a scan of the range.
//
// An item that carries its events' store times (Item.Times) is read
// without headers when it is dense or lists its sequences: the server then
// sends only the bodies, and neither it nor the client builds or parses
// six headers per event, a large part of the pipeline's CPU. Each reply's end-of-batch
// names the last sequence sent; only a batch whose messages are exactly the
// next sequences is taken, and anything else (an event deleted from the
// range, a miscount) is read again with headers as below. So either every
// event returned is Bare (no Subject or Header; ReadItemHeaders reads them
// when needed) or none is.
func (r *Reader) ReadItem(ctx context.Context, it Item) ([]Stored, error) {
	if it.Times != nil && len(it.Times.OffsetsMs) == it.Count {
		out, ok, err := r.readBare(ctx, it)
		if err != nil || ok {
			return out, err
		}
	}
	return r.ReadItemHeaders(ctx, it)
}

// readBare reads a dense or listed item without headers; ok is false when
// the stream did not hold exactly the item's sequences (or the item is
// neither dense nor listed).
func (r *Reader) readBare(ctx context.Context, it Item) (out []Stored, ok bool, err error) {
	chunks := func(yield func(uint64, int) bool) {
		for from := it.FromSeq; from <= it.ToSeq; {
			n := int(min(it.ToSeq-from+1, uint64(r.chunk)))
			if !yield(from, n) {
				return
			}
			from += uint64(n)
		}
	}
	var (
		seqs func(yield func(from uint64, n int) bool)
		keep func(seq uint64) bool // nil: every sequence read is the item's
	)
	listed := len(it.Seqs) > 0 && len(it.Seqs) == it.Count
	switch {
	case listed && RangeRead(it.Count, it.ToSeq-it.FromSeq+1):
		// The whole range, every sequence of it, keeping the listed ones.
		seqs, keep, out = chunks, listedSeqs(it.Seqs), make([]Stored, 0, it.Count)
	case listed:
		return r.readListed(ctx, it)
	case uint64(it.Count) == it.ToSeq-it.FromSeq+1:
		seqs = chunks
		if it.Count > r.chunk { // more than one get: gather them in one slice
			out = make([]Stored, 0, it.Count)
		}
	default:
		return nil, false, nil
	}
	for from, n := range seqs {
		for n > 0 {
			b, err := r.itemGet(ctx, it.Tenant, directGetRequest{Seq: from, Batch: n, NoHdr: true}, from, 0)
			if err != nil {
				return nil, false, err
			}
			k := uint64(len(b.Msgs))
			if k == 0 || k > uint64(n) || b.LastSeq != from+k-1 {
				return nil, false, nil
			}
			for i := range b.Msgs {
				m := &b.Msgs[i]
				if !m.Bare { // a server that ignored no_hdr: read with headers, which checks subjects
					return nil, false, nil
				}
				seq := from + uint64(i)
				switch {
				case keep == nil:
					m.Seq, m.Time = seq, it.Times.At(len(out)+i)
				case keep(seq):
					m.Seq, m.Time = seq, it.Times.At(len(out))
					out = append(out, *m)
				}
			}
			if keep == nil {
				if out == nil { // the whole item in one reply
					out = b.Msgs
				} else {
					out = append(out, b.Msgs...)
				}
			}
			from, n = from+k, n-int(k) // a reply cut short by max_bytes continues
		}
	}
	return out, len(out) == it.Count, nil
}

// listedGets is how many of one listed item's lookups by sequence are
// asked at once (each also takes one of the Reader's ReadsInFlight).
const listedGets = 8

// readListed reads a listed item that RangeRead does not read as a range:
// a lookup by sequence per listed event, listedGets at a time, without
// headers. A tenant whose events interleave with thousands of others'
// has batches whose range is thousands of times their count; a lookup by
// sequence costs the server the same whatever the range, a filtered scan
// of the range costs it every message in between. ok is false when a
// listed event is no longer stored as it was (then the caller reads with
// headers).
func (r *Reader) readListed(ctx context.Context, it Item) (out []Stored, ok bool, err error) {
	out = make([]Stored, len(it.Seqs))
	var (
		next    atomic.Int64
		missing atomic.Bool
		g, gctx = errgroup.WithContext(ctx)
	)
	for range min(listedGets, len(it.Seqs)) {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(it.Seqs) || missing.Load() {
					return nil
				}
				seq := it.Seqs[i]
				b, err := r.itemGet(gctx, it.Tenant, directGetRequest{Seq: seq, Batch: 1, NoHdr: true}, seq, 0)
				if err != nil {
					return err
				}
				if len(b.Msgs) != 1 || b.LastSeq != seq || !b.Msgs[0].Bare {
					missing.Store(true)
					return nil
				}
				m := b.Msgs[0]
				m.Seq, m.Time = seq, it.Times.At(i)
				out[i] = m
			}
		})
	}
	if err := g.Wait(); err != nil {
		return nil, false, err
	}
	if missing.Load() {
		return nil, false, nil
	}
	return out, true, nil
}

// itemGet is r.get for ReadItem: it waits for one of the Reader's
// ReadsInFlight places first, so that the events asked for and not yet
// received stay few (ReadChunk).
func (r *Reader) itemGet(ctx context.Context, tenant string, dg directGetRequest, from, upTo uint64) (Batch, error) {
	if r.slots != nil {
		select {
		case r.slots <- struct{}{}:
			defer func() { <-r.slots }()
		case <-ctx.Done():
			return Batch{}, fmt.Errorf("%w: tenant %s from %d: waiting for a read: %v", ErrStreamRead, tenant, from, ctx.Err())
		}
	}
	return r.get(ctx, "tenant "+tenant, dg, from, upTo, ReadOptions{})
}

// listedSeqs returns a filter of a listed item's sequences for a read in
// sequence order: true for each listed sequence as it comes; a listed one
// the read does not return (no longer stored) is passed over.
func listedSeqs(seqs []uint64) func(seq uint64) bool {
	j := 0
	return func(seq uint64) bool {
		for j < len(seqs) && seqs[j] < seq {
			j++
		}
		if j < len(seqs) && seqs[j] == seq {
			j++
			return true
		}
		return false
	}
}

// RangeRead says whether a listed item of count events over width
// sequences is read as its whole range, every sequence of it, keeping the
// listed ones (width at most 4 × count: a batch of a tenant whose events
// interleave with a few others'), rather than one request per listed
// sequence. Read by sequence without a subject filter, the range costs
// the server neither a subject match per message nor the count of the
// tenant's pending events a filtered batch request makes it take, and
// without headers, none of the six it builds per event.
func RangeRead(count int, width uint64) bool {
	return count > 0 && width <= 4*uint64(count)
}

// LookupSpread is how many sequences per event an item's range must span
// for LookupRead.
const LookupSpread = 128

// LookupRead says whether an item of count events over width sequences
// costs the server less read by a lookup per event than by a scan of its
// range with the tenant's subject filter: when the range spans at least
// LookupSpread sequences per event, as a batch of a tenant whose events
// interleave with hundreds of others' does. A lookup costs the server the
// same wherever the event lies; the scan passes over every message of the
// range, and past about a hundred messages an event it costs more than
// the lookups (BenchmarkSparseItemRead). The dispatcher lists such an
// item's sequences up to SeqsMax; ReadItem then looks each up.
func LookupRead(count int, width uint64) bool {
	return count > 0 && width >= LookupSpread*uint64(count)
}

// ReadItemHeaders reads it's events with their headers (subject, store
// time, the publisher's headers); ReadItem does so for items without Times.
func (r *Reader) ReadItemHeaders(ctx context.Context, it Item) ([]Stored, error) {
	filter, err := r.subjects(ctx, it.Tenant, it.Priority)
	if err != nil {
		return nil, err
	}
	keep := func(m Stored) bool {
		tenant, _, p, err := events.ParseSubject(m.Subject)
		return err == nil && tenant == it.Tenant && (it.Priority == "" || p == it.Priority.Or())
	}
	out := make([]Stored, 0, it.Count)
	width := it.ToSeq - it.FromSeq + 1
	listed := len(it.Seqs) > 0 && len(it.Seqs) == it.Count
	switch {
	case listed && !RangeRead(it.Count, width):
		for _, seq := range it.Seqs {
			b, err := r.itemGet(ctx, it.Tenant, directGetRequest{Seq: seq, Batch: 1}, seq, seq)
			if err != nil {
				return out, err
			}
			// A deleted sequence answers with the next message: not ours.
			if len(b.Msgs) == 1 && b.Msgs[0].Seq == seq && keep(b.Msgs[0]) {
				out = append(out, b.Msgs[0])
			}
		}
		return out, nil
	case listed:
		// Read as the whole range, as a dense item is, keeping the listed
		// sequences of the tenant's subjects.
		ours, isListed := keep, listedSeqs(it.Seqs)
		keep = func(m Stored) bool { return isListed(m.Seq) && ours(m) }
	case it.FromSeq == 0 || it.ToSeq < it.FromSeq || uint64(it.Count) != width:
		// Shared with other tenants, not listed: a filtered read.
		for from := it.FromSeq; from <= it.ToSeq && len(out) < it.Count; {
			dg := nextRequest(filter, from, it.ToSeq, min(it.Count-len(out), r.chunk))
			b, err := r.itemGet(ctx, it.Tenant, dg, from, it.ToSeq)
			if err != nil {
				return out, err
			}
			if len(b.Msgs) == 0 {
				break
			}
			out = append(out, b.Msgs...)
			from = b.Msgs[len(b.Msgs)-1].Seq + 1
		}
		return out, nil
	}
	for from := it.FromSeq; from <= it.ToSeq && len(out) < it.Count; {
		n := int(min(it.ToSeq-from+1, uint64(r.chunk)))
		b, err := r.itemGet(ctx, it.Tenant, directGetRequest{Seq: from, Batch: n}, from, it.ToSeq)
		if err != nil {
			return out, err
		}
		if len(b.Msgs) == 0 {
			break
		}
		for _, m := range b.Msgs {
			if keep(m) {
				out = append(out, m)
			}
		}
		from = b.Msgs[len(b.Msgs)-1].Seq + 1
	}
	return out[:min(len(out), it.Count)], nil
}
