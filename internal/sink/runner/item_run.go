package runner

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// errStopped: the runner is shutting down (or the item's context ended)
// before the item finished; it is handed back.
var errStopped = errors.New("stopped before the item finished")

// handle runs one work item from fetch to ack, nak or term.
func (r *Runner) handle(stop, hard context.Context, msg jetstream.Msg) {
	start := time.Now()
	r.m.inFlight.Inc()
	outcome := outcomeHandedBack
	defer func() {
		r.m.inFlight.Dec()
		r.m.items.WithLabelValues(outcome).Inc()
		r.m.itemSeconds.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	}()
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("panic while handling a work item; handed back", "subject", msg.Subject(), "panic", p, "stack", string(debug.Stack()))
			_ = msg.Nak()
			outcome = outcomeHandedBack
		}
	}()
	if stop.Err() != nil {
		_ = msg.Nak()
		return
	}
	it, err := work.Decode(msg.Data())
	if err == nil && it.Dest != r.cfg.Dest {
		err = fmt.Errorf("%w: item for destination %q on the %q consumer", work.ErrInvalidItem, it.Dest, r.cfg.Dest)
	}
	if err != nil {
		r.log.Error("malformed work item terminated", "subject", msg.Subject(), "err", err)
		if terr := msg.TermWithReason(err.Error()); terr != nil {
			r.log.Warn("terminate malformed work item", "subject", msg.Subject(), "err", terr)
		}
		outcome = outcomeTerminated
		return
	}
	var deliveries uint64 = 1
	if md, err := msg.Metadata(); err == nil {
		deliveries = md.NumDelivered
	}
	ctx, cancel := context.WithCancel(hard)
	defer cancel()
	ir := &itemRun{
		r: r, msg: msg, item: it, deliveries: deliveries,
		log: r.log.With("item", it.MsgID(), "tenant", it.Tenant, "lease", it.LeaseID,
			"range", fmt.Sprintf("%d..%d", it.FromSeq, it.ToSeq), "delivery", deliveries),
	}
	if r.tracer != nil {
		var span trace.Span
		ctx, span = r.startItem(ctx, msg, it, deliveries)
		defer func() { endItem(span, outcome, ir.applied) }()
	}
	ir.stopHeartbeat = ir.heartbeat(ctx)
	defer ir.stopHeartbeat()
	outcome = ir.run(stop, ctx)
}

// itemRun is one work item in progress, from its fetch to its ack, nak or
// term: what was read, what failed and how often, the letters to publish.
type itemRun struct {
	r          *Runner
	msg        jetstream.Msg
	item       work.Item
	deliveries uint64
	log        *slog.Logger

	stopHeartbeat func()
	fenced        atomic.Bool // the lease was found stale

	stored  []work.Stored
	headers bool // fillHeaders ran
	recs    []sink.Record
	src     []int // recs[k] came from stored[src[k]]
	fails   []failure
	letters []dlq.Letter
	applied int
	down    bool // the batch outlived the retry budget: held and probed (applyLoop)
}

// failure is what is known about a record's failures so far.
type failure struct {
	attempts    int
	first, last time.Time
}

func (ir *itemRun) run(stop, ctx context.Context) string {
	cfg := ir.r.cfg
	if err := ir.read(stop, ctx); err != nil {
		ir.log.Warn("work item handed back: cannot read its events", "err", err)
		_ = ir.msg.Nak()
		return outcomeHandedBack
	}
	todo := make([]int, len(ir.recs))
	for k := range todo {
		todo[k] = k
	}
	if ir.deliveries >= uint64(cfg.MaxDeliver) && len(todo) > 0 {
		reason := fmt.Sprintf("work item delivered %d times (MaxDeliver) without finishing; dead-lettered unapplied so it is not dropped", ir.deliveries)
		for _, k := range todo {
			ir.letter(k, sink.ClassUnknown.String(), "max deliver", reason)
		}
		todo = nil
	}
	todo, err := ir.applyLoop(stop, ctx, todo)
	if err != nil {
		ir.log.Info("work item handed back", "err", err, ir.storedRequests())
		_ = ir.msg.Nak()
		return outcomeHandedBack
	}
	return ir.finish(stop, ctx, len(todo))
}

// read fills ir.stored and ir.recs: from the bodies the item carries, or
// else from PRODUCTS (readProducts).
func (ir *itemRun) read(stop, ctx context.Context) error {
	mode := "carried"
	if ir.item.Bodies != nil {
		ir.stored = carriedStored(ir.item)
		// A redrive's sequences may name other events in PRODUCTS by
		// now: its events go without headers (fillHeaders).
		if ir.item.Redrive {
			ir.headers = true
		}
		ir.decode()
	} else {
		var err error
		if mode, err = ir.readProducts(stop, ctx); err != nil {
			return err
		}
	}
	ir.r.m.readEvents.WithLabelValues(mode, strconv.FormatBool(ir.item.Replay)).Add(float64(len(ir.stored)))
	ir.fails = make([]failure, len(ir.recs))
	return nil
}

// carriedStored returns the bodies an item carries as stored events. Each
// one's subject is the item tenant's subject of the body's op and the
// item's priority (PRODUCTS binds one subject per op and priority), so
// decode checks the body against it as against a subject read from
// PRODUCTS. Their headers are not carried:
// fillHeaders reads them when a dead letter or a log line needs them.
func carriedStored(it work.Item) []work.Stored {
	subjects := make(map[events.Op]string, 2)
	out := make([]work.Stored, len(it.Bodies))
	for i, b := range it.Bodies {
		subj, ok := subjects[b.Op]
		if !ok {
			subj, _ = events.SubjectFor(it.Tenant, b.Op, it.Priority) // valid: work.Decode checked the tenant, every op and the priority
			subjects[b.Op] = subj
		}
		out[i] = work.Stored{Seq: b.Seq, Subject: subj, Time: time.UnixMilli(b.StoredMs).UTC(), Data: b.Data}
	}
	return out
}

// readProducts fills ir.stored and ir.recs from PRODUCTS, retrying read
// errors with backoff, and says how it read them (bare or headers). A
// range shorter than dispatched becomes a KindRange letter; an event that
// does not decode becomes a permanent letter.
func (ir *itemRun) readProducts(stop, ctx context.Context) (mode string, err error) {
	if err := ir.readStored(stop, ctx, ir.r.reader.ReadItem); err != nil {
		return "", err
	}
	bare := len(ir.stored) > 0 && ir.stored[0].Bare // a read is all bare or all with headers (ReadItem)
	why := ir.decode()
	if why == "" && bare {
		why = ir.checkBareOps(ctx)
	}
	if why != "" {
		// Read without headers, an event's subject is not known, only
		// what the item says of its range: read the item as the header
		// path does, where each event is checked against its own subject
		// (its events are never bare, so decode cannot refuse them again).
		ir.log.Warn("a work item's events read without headers do not match it; reading them with headers", "why", why)
		if err := ir.readStored(stop, ctx, ir.r.reader.ReadItemHeaders); err != nil {
			return "", err
		}
		ir.decode()
		bare = false
	}
	if bare {
		return "bare", nil
	}
	return "headers", nil
}

// readStored fills ir.stored with read, retrying read errors with backoff.
func (ir *itemRun) readStored(stop, ctx context.Context, read func(context.Context, work.Item) ([]work.Stored, error)) error {
	it := ir.item
	return ir.retry(stop, ctx, "read events", func(ctx context.Context) error {
		out, err := read(ctx, it)
		if err != nil {
			return err
		}
		if len(out) < it.Count {
			if err := ir.r.shortRead(ctx, it, out); err != nil {
				return err
			}
		}
		ir.stored = out
		return nil
	})
}

// decode fills ir.recs (and ir.letters: a lost range, events that do not
// decode, events whose body disagrees with their subject) from ir.stored.
// It stops at a bare event whose body names another tenant than the
// item's, and says why.
func (ir *itemRun) decode() (why string) {
	it := ir.item
	ir.letters, ir.recs, ir.src = nil, make([]sink.Record, 0, len(ir.stored)), make([]int, 0, len(ir.stored))
	now := ir.r.cfg.Now()
	if missing := it.Count - len(ir.stored); missing > 0 {
		ir.letters = append(ir.letters, dlq.Letter{
			Kind: dlq.KindRange, Dest: ir.r.cfg.Dest, Tenant: it.Tenant,
			Reason: fmt.Sprintf("range %d..%d held %d of %d dispatched events: %d left %s (MaxAge or MaxBytes) before they were applied",
				it.FromSeq, it.ToSeq, len(ir.stored), it.Count, missing, ir.r.cfg.ProductsStream),
			Class: sink.ClassPermanent.String(), Rule: "range aged out",
			Deliveries: ir.deliveries, FirstFailure: now, LastFailure: now,
			SourceStream: ir.r.cfg.ProductsStream, SourceSeq: it.FromSeq, Lease: it.LeaseID, Data: ir.msg.Data(),
		})
		ir.log.Error("events of a work item are gone from the stream; recorded as a lost range", "missing", missing, "count", it.Count,
			ir.storedRequests())
	}
	for i, s := range ir.stored {
		ev, err := events.Decode(s.Data)
		if err != nil {
			ir.letters = append(ir.letters, ir.eventLetter(s, failure{first: now, last: now}, sink.ClassPermanent.String(), "invalid event",
				"stored event does not decode: "+err.Error()))
			continue
		}
		if s.Bare && ev.Tenant != it.Tenant {
			return fmt.Sprintf("seq %d names tenant %q", s.Seq, ev.Tenant)
		}
		if !s.Bare {
			if err := ev.CheckSubject(s.Subject); err != nil {
				var me *events.SubjectMismatchError
				errors.As(err, &me)
				ir.log.Warn("a stored event disagrees with its subject; dead-lettered", "seq", s.Seq, "subject", s.Subject, "err", err)
				ir.letters = append(ir.letters, ir.eventLetter(s, failure{first: now, last: now}, sink.ClassPermanent.String(), string(me.Rule), err.Error()))
				continue
			}
		}
		ir.recs = append(ir.recs, sink.Record{Seq: s.Seq, Event: ev, PublishedAt: s.Time})
		ir.src = append(ir.src, i)
	}
	return ""
}

// checkBareOps checks the ops of events read without headers against
// their subjects: the sequences of the tenant's delete subject in the
// item's range (one direct get, OpSeqs) must be exactly the events whose
// body says delete, since the stream stores events of no other op
// (events.StreamSubjects). It says why not, or "".
func (ir *itemRun) checkBareOps(ctx context.Context) string {
	it := ir.item
	deletes := map[uint64]bool{}
	for _, rec := range ir.recs {
		if rec.Event.Op == events.OpDelete {
			deletes[rec.Seq] = true
		}
	}
	seqs, err := ir.r.reader.OpSeqs(ctx, it.Tenant, events.OpDelete, it.Priority, it.FromSeq, it.ToSeq, len(deletes)+1)
	if err != nil {
		return "cannot list the range's delete subjects: " + err.Error()
	}
	for _, seq := range seqs {
		if !deletes[seq] {
			return fmt.Sprintf("seq %d is stored on the delete subject; its body says otherwise or does not decode", seq)
		}
	}
	if len(seqs) != len(deletes) {
		return fmt.Sprintf("%d bodies say delete, %d events are stored on the delete subject", len(deletes), len(seqs))
	}
	return ""
}

// shortRead judges a range that read fewer events than were dispatched.
// Any replica answers a direct get, and a restarted node answers them once
// it is 90 % synchronized (nats-server 2.15): it may lack the newest events.
// If the stream's leader holds one of the tenant's events in the range after
// the last one read, the read is retried (an error); otherwise the missing
// events really left the stream. Without that check, acknowledged events
// read from a restarted node would be dead-lettered as "aged out" (the
// NATS failover test restarts nodes under traffic).
func (r *Runner) shortRead(ctx context.Context, it work.Item, out []work.Stored) error {
	from := it.FromSeq
	if len(out) > 0 {
		from = out[len(out)-1].Seq + 1
	}
	seq, ok, err := r.reader.NextSeqFromLeader(ctx, it.Tenant, from)
	switch {
	case err != nil:
		return fmt.Errorf("range %d..%d read %d of %d events; checking with the stream leader: %w",
			it.FromSeq, it.ToSeq, len(out), it.Count, err)
	case ok && seq <= it.ToSeq:
		return fmt.Errorf("%w: range %d..%d read %d of %d events, but the stream leader holds seq %d: a replica behind answered",
			work.ErrStreamRead, it.FromSeq, it.ToSeq, len(out), it.Count, seq)
	}
	return nil
}

// applyLoop applies recs[todo] until every record is applied or
// dead-lettered, or the lease went stale (the rest is returned). errStopped
// when the item must be handed back.
func (ir *itemRun) applyLoop(stop, ctx context.Context, todo []int) ([]int, error) {
	cfg := ir.r.cfg
	bo := cfg.newBackOff()
	for attempt := 1; len(todo) > 0; attempt++ {
		batch := ir.batch(todo)
		if stop.Err() != nil {
			return todo, errStopped
		}
		select { // wait for an apply slot; handed back if stopped meanwhile
		case ir.r.applying <- struct{}{}:
		case <-stop.Done():
			return todo, errStopped
		case <-ctx.Done():
			return todo, errStopped
		}
		errs, err := ir.apply(ctx, batch)
		<-ir.r.applying
		if ctx.Err() != nil {
			return todo, errStopped
		}
		now := cfg.Now()
		var (
			retry      []int
			retryAfter time.Duration
			class      sink.Class
			lastErr    error
		)
		judge := func(k int, e error) {
			out := sink.Classify(ir.r.sink, e)
			f := &ir.fails[k]
			f.attempts++
			if f.first.IsZero() {
				f.first = now
			}
			f.last = now
			switch {
			case out.Class == sink.ClassPermanent:
				ir.letter(k, out.Class.String(), out.Rule, "rejected: "+e.Error())
			case out.Class == sink.ClassUnknown && f.attempts >= cfg.MaxAttempts:
				ir.letter(k, out.Class.String(), out.Rule, fmt.Sprintf("gave up after %d attempts: %v", f.attempts, e))
			default:
				retry = append(retry, k)
				retryAfter = max(retryAfter, out.RetryAfter)
				class, lastErr = out.Class, e
			}
		}
		if err != nil {
			for _, k := range todo {
				judge(k, err)
			}
		} else {
			var tenantEndToEnd prometheus.Observer
			if !ir.item.Replay {
				tenantEndToEnd = ir.r.latency.observer(ir.item.Tenant, len(errs))
			}
			for n, e := range errs {
				k := todo[n]
				if e != nil {
					judge(k, e)
					continue
				}
				ir.applied++
				ir.r.m.applied.Inc()
				if !ir.item.Replay { // a replayed event's age is the replay's, not the pipeline's
					age := now.Sub(ir.recs[k].PublishedAt).Seconds()
					ir.r.m.endToEnd.Observe(age)
					tenantEndToEnd.Observe(age)
				}
			}
		}
		if len(retry) == 0 {
			return nil, nil
		}
		if ir.fenced.Load() {
			return retry, nil
		}
		d := bo.NextBackOff()
		kind := tenancy.WaitRetrying
		if d == backoff.Stop { // the retry budget is spent
			since := ir.fails[retry[0]].first
			for _, k := range retry {
				if f := ir.fails[k].first; f.Before(since) {
					since = f
				}
			}
			if class != sink.ClassTransient || cfg.MaxHold < 0 || now.Sub(since) >= cfg.MaxHold {
				gaveUp := fmt.Sprintf("gave up after %s of retries", cfg.Backoff.MaxElapsed)
				if class == sink.ClassTransient && cfg.MaxHold >= 0 {
					gaveUp = fmt.Sprintf("gave up after holding the batch for %s, the destination down since %s", cfg.MaxHold, since.UTC().Format(time.RFC3339))
				}
				for _, k := range retry {
					ir.letter(k, class.String(), sink.Classify(ir.r.sink, lastErr).Rule,
						fmt.Sprintf("%s (%d attempts): %v", gaveUp, ir.fails[k].attempts, lastErr))
				}
				return nil, nil
			}
			// A destination failing transiently for longer than the budget
			// is down, not refusing these events: hold the batch (its slot
			// and lease with it) and probe at the longest backoff until it
			// is back or MaxHold has passed. Its tenant's backlog waits in
			// PRODUCTS meanwhile.
			if !ir.down {
				ir.down = true
				ir.log.Warn("destination down; holding the batch and probing", "since", since, "records", len(retry), "err", lastErr)
			}
			d, kind = cfg.Backoff.Max, tenancy.WaitDown
			lastErr = fmt.Errorf("destination down since %s: %w", since.UTC().Format(time.RFC3339), lastErr)
		}
		d = max(d, min(retryAfter, cfg.RetryAfterMax))
		ir.r.m.retries.WithLabelValues(class.String()).Inc()
		ir.log.Info("apply failed; retrying", "attempt", attempt, "records", len(retry), "class", class.String(), "in", d, "err", lastErr,
			ir.recRequests(retry))
		ir.noteWait(ctx, kind, lastErr, fmt.Sprintf("attempt %d failed (%s), %d records, next in %s: %v",
			attempt, class, len(retry), d.Round(time.Millisecond), lastErr))
		if !sleep(stop, ctx, d) {
			return retry, errStopped
		}
		todo = retry
	}
	return nil, nil
}

// batch returns recs[todo]: recs itself when todo is every record, as on
// a first attempt (todo is always an increasing subset of recs' indexes:
// run starts with all of them, a retry keeps todo's order; a sink does not
// modify its batch), else a copy.
func (ir *itemRun) batch(todo []int) []sink.Record {
	if len(todo) == len(ir.recs) {
		return ir.recs
	}
	batch := make([]sink.Record, len(todo))
	for n, k := range todo {
		batch[n] = ir.recs[k]
	}
	return batch
}

// noteWait records on the lease why the item is not finishing (status
// shows it): the destination's circuit is open, or a failing batch is being
// retried. Best effort: a failure is logged, a stale lease ignored (the
// heartbeat reports it).
func (ir *itemRun) noteWait(ctx context.Context, kind string, err error, detail string) {
	if errors.Is(err, sink.ErrCircuitOpen) {
		kind = tenancy.WaitCircuitOpen
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := ir.r.leases.SetLeaseWait(wctx, ir.item.LeaseID, ir.item.Token, kind, detail); err != nil &&
		!errors.Is(err, tenancy.ErrStaleLease) && ctx.Err() == nil {
		ir.log.Warn("record why the item waits", "err", err)
	}
}

// apply calls the sink, turning a panic or a malformed result into an error.
func (ir *itemRun) apply(ctx context.Context, batch []sink.Record) (errs []error, err error) {
	defer func() {
		if p := recover(); p != nil {
			ir.log.Error("sink panicked", "panic", p, "stack", string(debug.Stack()))
			errs, err = nil, fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	errs, err = ir.r.sink.Apply(sink.WithCaughtUp(ctx, ir.item.CaughtUp), batch)
	if err == nil && len(errs) != len(batch) {
		return nil, fmt.Errorf("%w: %d errors for %d records", ErrBadResult, len(errs), len(batch))
	}
	return errs, err
}

// finish publishes the letters, releases the lease and acks. left records
// were not applied because the lease went stale.
func (ir *itemRun) finish(stop, ctx context.Context, left int) string {
	ir.stopHeartbeat()
	if len(ir.letters) > 0 {
		err := ir.retry(stop, ctx, "publish dead letters", func(ctx context.Context) error {
			return ir.r.dlq.Publish(ctx, ir.letters)
		})
		if err != nil {
			ir.log.Warn("work item handed back: dead letters not stored", "err", err, ir.letterRequests())
			_ = ir.msg.Nak()
			return outcomeHandedBack
		}
		byClass := map[string]int{}
		for _, l := range ir.letters {
			byClass[l.Class]++
			ir.r.m.deadLetters.WithLabelValues(l.Class).Inc()
		}
		ir.log.Warn("dead-lettered", "letters", len(ir.letters), "by_class", byClass, "applied", ir.applied,
			"first_reason", ir.letters[0].Reason, "first_seq", ir.letters[0].SourceSeq, ir.letterRequests())
	}
	outcome := outcomeDone
	if ir.fenced.Load() {
		outcome = outcomeFenced
		ir.log.Warn("lease fenced out: the range was re-dispatched under a newer lease; acking without release and leaving the rest to it",
			"applied", ir.applied, "left", left, ir.storedRequests())
	} else {
		ir.release(ctx)
	}
	if err := ir.ack(context.WithoutCancel(ctx)); err != nil {
		// The item will be delivered again and applied again, idempotently.
		ir.log.Warn("ack work item", "err", err)
	}
	return outcome
}

// ackAttemptTimeout bounds the first attempt to acknowledge an item; each
// retry gets twice as long as the one before. An ack sent while the
// consumer's leader moves (a NATS node lost) is dropped without an answer;
// one attempt bounded only by AckWait would hold the worker for all of it.
// Short attempts get through as soon as the new leader answers.
const ackAttemptTimeout = 2 * time.Second

// ack acknowledges the item (double ack: the server confirms), in attempts
// of growing length until AckWait is spent. Acking again after an attempt
// that did land is harmless.
func (ir *itemRun) ack(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ir.r.cfg.AckWait)
	defer cancel()
	for attempt := ackAttemptTimeout; ; attempt *= 2 {
		actx, acancel := context.WithTimeout(ctx, attempt)
		err := ir.msg.DoubleAck(actx)
		acancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond): // "no responders" fails at once
		}
	}
}

// release frees the slot. A stale lease is logged and otherwise ignored.
// Other failures (the database restarting, say) are retried with backoff
// for up to ExtendEvery — well inside the lease TTL and AckWait — then left
// to the lease's expiry. Giving up early is costly: the tenant's slot stays
// held until the lease expires, and the batch is then re-dispatched and
// applied a second time.
func (ir *itemRun) release(ctx context.Context) {
	give := time.Now().Add(ir.r.cfg.ExtendEvery)
	wait := 100 * time.Millisecond
	var err error
	for {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = ir.r.leases.Release(rctx, ir.item.LeaseID, ir.item.Token)
		cancel()
		switch {
		case err == nil:
			return
		case errors.Is(err, tenancy.ErrStaleLease):
			ir.r.m.staleLeases.Inc()
			ir.log.Warn("lease was stale at release (re-dispatched meanwhile); item acked anyway", "err", err)
			return
		}
		if time.Now().Add(wait).After(give) {
			break
		}
		ir.log.Info("release lease failed; retrying", "in", wait, "err", err)
		if !sleep(ctx, ctx, wait) {
			break
		}
		wait = min(2*wait, 2*time.Second)
	}
	ir.log.Error("release lease failed; it expires by itself", "err", err)
}

// retry runs f until it succeeds, the backoff gives up (its last error) or
// the runner stops (errStopped).
func (ir *itemRun) retry(stop, ctx context.Context, what string, f func(context.Context) error) error {
	bo := ir.r.cfg.newBackOff()
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errStopped
		}
		d := bo.NextBackOff()
		if d == backoff.Stop {
			return fmt.Errorf("%s: %w", what, err)
		}
		ir.log.Info(what+" failed; retrying", "in", d, "err", err)
		if !sleep(stop, ctx, d) {
			return errStopped
		}
	}
}

// letter dead-letters recs[k].
func (ir *itemRun) letter(k int, class, rule, reason string) {
	ir.letters = append(ir.letters, ir.eventLetter(ir.stored[ir.src[k]], ir.fails[k], class, rule, reason))
}

func (ir *itemRun) eventLetter(s work.Stored, f failure, class, rule, reason string) dlq.Letter {
	if ir.headerless(s) {
		ir.fillHeaders()
		for _, h := range ir.stored {
			if h.Seq == s.Seq {
				s = h
				break
			}
		}
	}
	return dlq.Letter{
		Kind: dlq.KindEvent, Dest: ir.r.cfg.Dest, Tenant: ir.item.Tenant,
		Reason: reason, Class: class, Rule: rule, Attempts: f.attempts, Deliveries: ir.deliveries,
		FirstFailure: f.first, LastFailure: f.last,
		SourceStream: ir.r.cfg.ProductsStream, SourceSeq: s.Seq, SourceSubject: s.Subject,
		Lease: ir.item.LeaseID, Header: s.Header, Data: s.Data, Redriven: ir.item.Redrive,
	}
}

// heartbeat keeps the item alive while it works: InProgress so JetStream
// does not redeliver it, Extend so the slot lease does not expire. The
// returned func stops it and waits; it may be called more than once.
func (ir *itemRun) heartbeat(ctx context.Context) func() {
	cfg := ir.r.cfg
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ip := time.NewTicker(cfg.InProgressEvery)
		defer ip.Stop()
		ext := time.NewTicker(cfg.ExtendEvery)
		defer ext.Stop()
		lease := tenancy.Lease{ID: ir.item.LeaseID, Token: ir.item.Token}
		for {
			select {
			case <-ctx.Done():
				return
			case <-ip.C:
				if err := ir.msg.InProgress(); err != nil && ctx.Err() == nil {
					ir.log.Warn("report work item in progress", "err", err)
				}
			case <-ext.C:
				ectx, c := context.WithTimeout(ctx, cfg.ExtendEvery)
				_, err := ir.r.leases.Extend(ectx, lease)
				c()
				switch {
				case errors.Is(err, tenancy.ErrStaleLease):
					ext.Stop()
					if !ir.fenced.Swap(true) {
						ir.r.m.staleLeases.Inc()
						ir.log.Warn("lease fenced out while working; no further retries under it", "err", err)
					}
				case err != nil && ctx.Err() == nil:
					ir.log.Warn("extend lease", "err", err)
				}
			}
		}
	}()
	return sync.OnceFunc(func() { cancel(); <-done })
}

// sleep waits d; false if stop or ctx ended first.
func sleep(stop, ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop.Done():
		return false
	case <-ctx.Done():
		return false
	}
}

// requestIDsMax bounds the request ids one log line names.
const requestIDsMax = 3

// requestIDs is the log attribute "requests" naming the distinct request
// ids (events.HeaderRequestID, set at ingest) of the events whose headers
// hs yields: the first requestIDsMax of them as ids, and count, how many
// there are in all. It ties a sink's log line to the ingest request.
func requestIDs(hs iter.Seq[nats.Header]) slog.Attr {
	seen := map[string]struct{}{}
	ids := []string{}
	for h := range hs {
		id := h.Get(events.HeaderRequestID)
		if _, dup := seen[id]; dup || id == "" {
			continue
		}
		seen[id] = struct{}{}
		if len(ids) < requestIDsMax {
			ids = append(ids, id)
		}
	}
	return slog.Group("requests", "ids", ids, "count", len(seen))
}

// headerless says whether s was taken without its headers: read bare, or
// carried in the item.
func (ir *itemRun) headerless(s work.Stored) bool { return s.Bare || ir.item.Bodies != nil }

// fillHeaders reads the headers (subject, request id, the publisher's
// headers) of events read without them or carried in the item, for a dead
// letter or a log line that names request ids: the rare paths. Best
// effort, once: events whose headers cannot be read (a carried event gone
// from PRODUCTS) stay without.
func (ir *itemRun) fillHeaders() {
	if ir.headers {
		return
	}
	ir.headers = true
	if !slices.ContainsFunc(ir.stored, ir.headerless) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	full, err := ir.r.reader.ReadItemHeaders(ctx, ir.item)
	if err != nil {
		ir.log.Warn("cannot read the headers of a work item's events", "err", err)
	}
	bySeq := make(map[uint64]work.Stored, len(full))
	for _, s := range full {
		bySeq[s.Seq] = s
	}
	for i, s := range ir.stored {
		if h, ok := bySeq[s.Seq]; ok && ir.headerless(s) {
			s.Subject, s.Header, s.Bare = h.Subject, h.Header, false
			ir.stored[i] = s
		}
	}
}

// lazyAttr is a log value computed only when the line is written: reading
// the headers of bare events costs a direct get, which a filtered-out line
// must not pay.
type lazyAttr func() slog.Value

func (f lazyAttr) LogValue() slog.Value { return f() }

// storedRequests names the request ids of every event read.
func (ir *itemRun) storedRequests() slog.Attr {
	return slog.Any("requests", lazyAttr(func() slog.Value { return ir.storedRequestsNow().Value }))
}

func (ir *itemRun) storedRequestsNow() slog.Attr {
	ir.fillHeaders()
	return requestIDs(func(yield func(nats.Header) bool) {
		for _, s := range ir.stored {
			if !yield(s.Header) {
				return
			}
		}
	})
}

// recRequests names the request ids of recs[ks].
func (ir *itemRun) recRequests(ks []int) slog.Attr {
	return slog.Any("requests", lazyAttr(func() slog.Value { return ir.recRequestsNow(ks).Value }))
}

func (ir *itemRun) recRequestsNow(ks []int) slog.Attr {
	ir.fillHeaders()
	return requestIDs(func(yield func(nats.Header) bool) {
		for _, k := range ks {
			if !yield(ir.stored[ir.src[k]].Header) {
				return
			}
		}
	})
}

// letterRequests names the request ids of the dead letters.
func (ir *itemRun) letterRequests() slog.Attr {
	return requestIDs(func(yield func(nats.Header) bool) {
		for _, l := range ir.letters {
			if !yield(l.Header) {
				return
			}
		}
	})
}
