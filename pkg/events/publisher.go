package events

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults for the Publisher options.
const (
	MaxInFlightDefault = 1024
	AckTimeoutDefault  = 10 * time.Second
	MaxRequestIDBytes  = 256
	// MaxTraceParentBytes bounds ContextWithTraceParent's value (a W3C
	// traceparent of version 00 has 55).
	MaxTraceParentBytes = 128
)

// Result is the outcome of publishing one event.
type Result struct {
	// Seq is the stream sequence of the stored event (of the first copy for
	// a duplicate).
	Seq uint64
	// Duplicate is true when the stream already held an event with the same
	// Key() inside its duplicate window; it was not stored again.
	Duplicate bool
	// Err is why the event was not stored: a *ValidationError
	// (ErrInvalidEvent) for an invalid event, else the publish, ack or
	// context error. A context or timeout error means "unknown": the event
	// may have been stored, and publishing it again is safe within the
	// duplicate window.
	Err error
	// ForeignDuplicate is the sequence of another tenant's message that
	// held the event's MsgID when it was published (WithDuplicateOwnerCheck):
	// the event was stored under an id of its own at Seq. 0 otherwise.
	ForeignDuplicate uint64
}

// PublisherOption configures a Publisher.
type PublisherOption func(*Publisher) error

// WithMaxInFlight bounds the messages one Publisher has sent but not yet seen
// acknowledged, across all concurrent calls. Default 1024.
func WithMaxInFlight(n int) PublisherOption {
	return func(p *Publisher) error {
		if n < 1 {
			return fmt.Errorf("%w: max in flight %d, want >= 1", ErrInvalidConfig, n)
		}
		p.sem = make(chan struct{}, n)
		return nil
	}
}

// WithValidatedEvents tells the Publisher that its caller validates every
// event before Publish (as ingest does through a Decoder with the same
// Limits), so Publish checks only what the subject is built from (tenant and
// op) instead of validating each event again.
func WithValidatedEvents() PublisherOption {
	return func(p *Publisher) error {
		p.validated = true
		return nil
	}
}

// WithLimits sets the Limits events are validated against. Default
// Limits{}.WithDefaults().
func WithLimits(l Limits) PublisherOption {
	return func(p *Publisher) error {
		p.limits = l.WithDefaults()
		return nil
	}
}

// WithDuplicateOwnerCheck makes Publish look up the stored message of
// every duplicate it is told of (one direct get each, so the connection
// needs $JS.API.DIRECT.GET.<stream>). MsgID keeps the ids of events
// published through a Publisher apart per tenant, but a tenant publishing
// with a NATS user of its own sets its own Nats-Msg-Id and could claim
// another tenant's id. When the stored message is on another tenant's
// subject, the event is published again under an id of its own
// (MsgID + "#" + a random suffix), so it is stored rather than reported as
// a duplicate; Result.ForeignDuplicate names the sequence that claimed
// the id. Ingest sets it.
func WithDuplicateOwnerCheck() PublisherOption {
	return func(p *Publisher) error {
		p.ownerCheck = true
		return nil
	}
}

// WithAckTimeout bounds the wait for one message's ack, and the wait for room
// in the JetStream context's own async window. Default 10s.
func WithAckTimeout(d time.Duration) PublisherOption {
	return func(p *Publisher) error {
		if d <= 0 {
			return fmt.Errorf("%w: ack timeout %v, want > 0", ErrInvalidConfig, d)
		}
		p.ackTimeout = d
		return nil
	}
}

// WithStream names the stream the events must land in. It is sent as the
// expected-stream header, so a subject bound to another stream (or none)
// fails loudly instead of storing events elsewhere. Default StreamName.
func WithStream(name string) PublisherOption {
	return func(p *Publisher) error {
		if name == "" {
			return fmt.Errorf("%w: empty stream name", ErrInvalidConfig)
		}
		p.stream = name
		return nil
	}
}

// callContext is what a Publish call's context asks of every message it
// sends: its request id and trace context headers.
type callContext struct {
	requestID   string
	traceParent string
}

type callContextKey struct{}

func callContextFrom(ctx context.Context) callContext {
	c, _ := ctx.Value(callContextKey{}).(callContext)
	return c
}

// ContextWithRequestID returns a context that makes Publish set
// HeaderRequestID to id on every message it sends. An id longer than
// MaxRequestIDBytes or holding control characters fails every event of the
// call with ErrInvalidRequestID.
func ContextWithRequestID(ctx context.Context, id string) context.Context {
	c := callContextFrom(ctx)
	c.requestID = id
	return context.WithValue(ctx, callContextKey{}, c)
}

// RequestIDFromContext returns the id set by ContextWithRequestID, or "".
func RequestIDFromContext(ctx context.Context) string {
	return callContextFrom(ctx).requestID
}

// ContextWithTraceParent returns a context that makes Publish set
// HeaderTraceParent to traceParent (a W3C traceparent) on every message it
// sends, so that a consumer's spans link to the publisher's trace. Set it
// only for a sampled trace: every header costs publish throughput. A value
// longer than MaxTraceParentBytes or holding control characters is not
// sent; tracing never fails a publish.
func ContextWithTraceParent(ctx context.Context, traceParent string) context.Context {
	c := callContextFrom(ctx)
	c.traceParent = traceParent
	return context.WithValue(ctx, callContextKey{}, c)
}

// Publisher publishes events to JetStream for upstream Go programs and for
// ingest. It validates each event, sends the valid ones asynchronously with
// Nats-Msg-Id = MsgID() inside a bounded in-flight window, and waits for every
// ack. It is safe for concurrent use.
//
// Acks are awaited per message with a timer of its own (WithAckTimeout). A
// message whose wait ended (timeout, context) stays registered in the
// JetStream context until the server answers; create that context with
// jetstream.WithPublishAsyncTimeout so such entries are dropped too.
type Publisher struct {
	js         jetstream.JetStream
	sem        chan struct{}
	limits     Limits
	ackTimeout time.Duration
	stream     string
	pubOpts    []jetstream.PublishOpt
	validated  bool
	ownerCheck bool
}

// NewPublisher returns a Publisher on js.
func NewPublisher(js jetstream.JetStream, opts ...PublisherOption) (*Publisher, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", ErrInvalidConfig)
	}
	p := &Publisher{
		js:         js,
		limits:     Limits{}.WithDefaults(),
		ackTimeout: AckTimeoutDefault,
		stream:     StreamName,
	}
	for _, o := range opts {
		if err := o(p); err != nil {
			return nil, err
		}
	}
	if p.sem == nil {
		p.sem = make(chan struct{}, MaxInFlightDefault)
	}
	p.pubOpts = []jetstream.PublishOpt{jetstream.WithStallWait(p.ackTimeout)}
	return p, nil
}

// pending is a sent message waiting for its ack.
type pending struct {
	i        int // index into the results
	paf      jetstream.PubAckFuture
	deadline time.Time
}

// Publish publishes evs and returns one Result per event, in order, after
// every sent event has been acknowledged or failed. Invalid events are not
// sent; they do not hold up the valid ones. When ctx ends, events not yet
// acknowledged get the context's error.
func (p *Publisher) Publish(ctx context.Context, evs []Event) []Result {
	res := make([]Result, len(evs))
	call := callContextFrom(ctx)
	if err := checkRequestID(call.requestID); err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	if !saneTraceParent(call.traceParent) {
		call.traceParent = ""
	}
	w := waiter{p: p, ctx: ctx, res: res}
	defer w.stop()
	pend := make([]pending, 0, len(evs))
	head := 0 // pend[head:] are not resolved yet
	for i := range evs {
		e := &evs[i]
		if err := p.check(e); err != nil {
			res[i].Err = err
			continue
		}
		// Take a window slot. While none is free, resolve our own oldest
		// message: its slot comes back whether it was acked or not.
		acquired := false
		for !acquired {
			select {
			case p.sem <- struct{}{}:
				acquired = true
				continue
			default:
			}
			if head < len(pend) {
				w.await(&pend[head])
				head++
				continue
			}
			select {
			case p.sem <- struct{}{}:
				acquired = true
			case <-ctx.Done():
				res[i].Err = fmt.Errorf("wait for room to publish: %w", context.Cause(ctx))
			}
			break
		}
		if !acquired {
			continue
		}
		if ctx.Err() != nil { // never send once the caller gave up
			<-p.sem
			res[i].Err = fmt.Errorf("publish: %w", context.Cause(ctx))
			continue
		}
		paf, err := p.js.PublishMsgAsync(e.msg(call, p.stream), p.pubOpts...)
		if err != nil {
			<-p.sem
			res[i].Err = fmt.Errorf("publish: %w", err)
			continue
		}
		pend = append(pend, pending{i: i, paf: paf, deadline: time.Now().Add(p.ackTimeout)})
	}
	for ; head < len(pend); head++ {
		w.await(&pend[head])
	}
	if p.ownerCheck {
		p.checkDuplicateOwners(ctx, evs, res, call)
	}
	return res
}

// checkDuplicateOwners publishes again, under an id of its own, every
// event reported as a duplicate of a message on another tenant's subject
// (WithDuplicateOwnerCheck).
func (p *Publisher) checkDuplicateOwners(ctx context.Context, evs []Event, res []Result, call callContext) {
	var stream jetstream.Stream
	for i := range res {
		r := &res[i]
		if r.Err != nil || !r.Duplicate {
			continue
		}
		if stream == nil {
			s, err := p.js.Stream(ctx, p.stream)
			if err != nil {
				r.Err = fmt.Errorf("check the owner of duplicate seq %d: %w", r.Seq, err)
				continue
			}
			stream = s
		}
		stored, err := stream.GetMsg(ctx, r.Seq)
		if err != nil {
			r.Err = fmt.Errorf("check the owner of duplicate seq %d: %w", r.Seq, err)
			continue
		}
		if tenant, _, _, err := ParseSubject(stored.Subject); err == nil && tenant == evs[i].Tenant {
			continue // the tenant's own repeat
		}
		m := evs[i].msg(call, p.stream)
		m.Header.Set(HeaderMsgID, evs[i].MsgID()+"#"+rand.Text())
		ack, err := p.js.PublishMsg(ctx, m)
		if err != nil {
			r.Err = fmt.Errorf("publish again after a duplicate of another tenant's seq %d: %w", r.Seq, err)
			continue
		}
		r.ForeignDuplicate, r.Seq, r.Duplicate = r.Seq, ack.Sequence, ack.Duplicate
	}
}

// PublishOne publishes one event; see Publish.
func (p *Publisher) PublishOne(ctx context.Context, e Event) Result {
	return p.Publish(ctx, []Event{e})[0]
}

// waiter resolves the pending messages of one Publish call.
type waiter struct {
	p     *Publisher
	ctx   context.Context
	res   []Result
	timer *time.Timer
}

// await records the outcome of m in the results and frees its window slot.
func (w *waiter) await(m *pending) {
	defer func() { <-w.p.sem }()
	r := &w.res[m.i]
	ok, errc := m.paf.Ok(), m.paf.Err()
	select { // fast path: already answered
	case ack := <-ok:
		r.Seq, r.Duplicate = ack.Sequence, ack.Duplicate
		return
	case err := <-errc:
		r.Err = fmt.Errorf("publish: %w", err)
		return
	default:
	}
	wait := time.Until(m.deadline)
	if w.timer == nil {
		w.timer = time.NewTimer(wait)
	} else {
		w.timer.Reset(wait)
	}
	select {
	case ack := <-ok:
		r.Seq, r.Duplicate = ack.Sequence, ack.Duplicate
	case err := <-errc:
		r.Err = fmt.Errorf("publish: %w", err)
	case <-w.timer.C:
		r.Err = fmt.Errorf("publish: no ack within %v: %w", w.p.ackTimeout, jetstream.ErrAsyncPublishTimeout)
	case <-w.ctx.Done():
		r.Err = fmt.Errorf("publish: waiting for ack: %w", context.Cause(w.ctx))
	}
	w.timer.Stop()
}

func (w *waiter) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

func checkRequestID(id string) error {
	if len(id) > MaxRequestIDBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidRequestID, len(id), MaxRequestIDBytes)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] == 0x7f {
			return fmt.Errorf("%w: %s has a control character at byte %d", ErrInvalidRequestID, quote(id), i)
		}
	}
	return nil
}

// saneTraceParent says whether a traceparent may go into a header: at
// most MaxTraceParentBytes, no control characters. "" is sane (none).
func saneTraceParent(tp string) bool {
	if len(tp) > MaxTraceParentBytes {
		return false
	}
	for i := 0; i < len(tp); i++ {
		if tp[i] < 0x20 || tp[i] == 0x7f {
			return false
		}
	}
	return true
}

// check validates e, or (WithValidatedEvents) only the parts of it that
// become its subject, so nothing unvalidated ever reaches a subject.
func (p *Publisher) check(e *Event) error {
	if !p.validated {
		return e.Validate(p.limits)
	}
	if reason := tenantProblem(e.Tenant); reason != "" {
		return &ValidationError{Field: "tenant", Reason: quote(e.Tenant) + " " + reason, Err: ErrInvalidTenant}
	}
	if !e.Op.Valid() {
		return invalid("op", "%s is not one of upsert, delete", quote(string(e.Op)))
	}
	return nil
}
