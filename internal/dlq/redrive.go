package dlq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Defaults for RedriveConfig.
const (
	RedriveHolderDefault    = "fairway-dlq-redrive"
	RedriveWaitDefault      = time.Minute
	RedriveMaxEventsDefault = 500
)

// Slots takes the slot a redrive's work item runs under, and gives back
// one whose item could not be published: pkg/tenancy's Store.
type Slots interface {
	AcquireBatch(ctx context.Context, tenant, dest, holder string, r tenancy.Range) (tenancy.Lease, error)
	Release(ctx context.Context, leaseID string, token int64) error
}

// RedriveConfig configures Queue.Redrive.
type RedriveConfig struct {
	// Slots holds the slot limits. Required.
	Slots Slots
	// Holder names the leases. Default "fairway-dlq-redrive".
	Holder string
	// WaitForSlot is how long to wait for a free slot of a (tenant,
	// destination) at its limit before its letters are left in place.
	// Default 1m.
	WaitForSlot time.Duration
	// MaxEvents is the most events one work item carries. Default 500.
	MaxEvents int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (c RedriveConfig) withDefaults() RedriveConfig {
	c.Holder = cmp.Or(c.Holder, RedriveHolderDefault)
	c.WaitForSlot = cmp.Or(c.WaitForSlot, RedriveWaitDefault)
	c.MaxEvents = cmp.Or(c.MaxEvents, RedriveMaxEventsDefault)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// RedriveResult is what happened to one letter.
type RedriveResult struct {
	Letter Letter
	// Item is the Nats-Msg-Id of the work item that carried the letter's
	// event back to its destination ("" when it was not redriven).
	Item string
	// Err is why the letter was left in place (ErrNotRedrivable, a slot
	// not free in time, a paused tenant, a publish or delete error).
	Err error
}

// Redrive sends the events of the letters matching f back to the
// destination each letter is from, and to no other: per (tenant,
// destination), sorted by source sequence, it takes a slot like any batch
// (tenancy AcquireBatch: the slot limit holds; it waits up to WaitForSlot
// for one), publishes one work item to WORK for that destination carrying
// the events (work.Item.Redrive), and deletes the letters once WORK has
// stored the item. The destination's sinks apply them as they apply any
// work item, idempotently, and release the slot. Letters that cannot be
// redriven stay, with Err set. The error is for failures to list at all.
func (q *Queue) Redrive(ctx context.Context, f Filter, cfg RedriveConfig) ([]RedriveResult, error) {
	cfg = cfg.withDefaults()
	if cfg.Slots == nil {
		return nil, errors.New("dlq: redrive: Slots is required")
	}
	letters, err := q.List(ctx, f)
	if err != nil {
		return nil, err
	}
	res := make([]RedriveResult, len(letters))
	type pair struct{ tenant, dest string }
	var order []pair
	groups := map[pair][]int{}
	ops := make([]events.Op, len(letters))
	for i, l := range letters {
		res[i].Letter = l
		if l.Kind != KindEvent {
			res[i].Err = fmt.Errorf("%w: %s letter (events lost from %s; nothing to send again)", ErrNotRedrivable, l.Kind, l.SourceStream)
			continue
		}
		ev, err := redrivable(l)
		if err == nil && l.SourceSeq == 0 {
			err = fmt.Errorf("%w: the letter names no source sequence", ErrNotRedrivable)
		}
		if err != nil {
			res[i].Err = err
			continue
		}
		ops[i] = ev.Op
		p := pair{l.Tenant, l.Dest}
		if _, ok := groups[p]; !ok {
			order = append(order, p)
		}
		groups[p] = append(groups[p], i)
	}
	maxBytes := int(q.js.Conn().MaxPayload()) - work.ItemOverhead
	now := cfg.Now()
	for _, p := range order {
		idx := groups[p]
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(letters[a].SourceSeq, letters[b].SourceSeq) })
		var (
			bodies []work.Body
			chunk  []int
			size   int
		)
		flush := func() {
			if len(chunk) > 0 {
				q.redriveItem(ctx, cfg, p.tenant, p.dest, bodies, chunk, res)
			}
			bodies, chunk, size = nil, nil, 0
		}
		for _, i := range idx {
			l := letters[i]
			if n := len(bodies); n > 0 && bodies[n-1].Seq == l.SourceSeq {
				chunk = append(chunk, i) // the same event dead-lettered twice: sent once
				continue
			}
			b := work.Body{Seq: l.SourceSeq, StoredMs: now.UnixMilli(), Op: ops[i], Data: l.Data}
			if len(bodies) == cfg.MaxEvents || len(bodies) > 0 && size+b.WireSize() > maxBytes {
				flush()
			}
			bodies, chunk, size = append(bodies, b), append(chunk, i), size+b.WireSize()
		}
		flush()
	}
	return res, nil
}

// redriveItem sends bodies (the events of letters res[chunk]) to dest in
// one work item and records the outcome in res.
func (q *Queue) redriveItem(ctx context.Context, cfg RedriveConfig, tenant, dest string, bodies []work.Body, chunk []int, res []RedriveResult) {
	fail := func(err error) {
		for _, i := range chunk {
			res[i].Err = err
		}
	}
	r := tenancy.Range{From: bodies[0].Seq, To: bodies[len(bodies)-1].Seq}
	lease, err := waitForSlot(ctx, cfg, tenant, dest, r)
	if err != nil {
		fail(err)
		return
	}
	it := work.Item{Tenant: tenant, Dest: dest, FromSeq: r.From, ToSeq: r.To, Count: len(bodies),
		LeaseID: lease.ID, Token: lease.Token, DispatchedAt: cfg.Now().UTC(), Bodies: bodies, Redrive: true}
	msg, err := it.Msg()
	if err == nil {
		_, err = q.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(work.StreamName))
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = cfg.Slots.Release(rctx, lease.ID, lease.Token)
		cancel()
		fail(fmt.Errorf("send to %s: %w", dest, err))
		return
	}
	for _, i := range chunk {
		res[i].Item = it.MsgID()
		if err := q.Delete(ctx, res[i].Letter.ID); err != nil && !errors.Is(err, ErrNotFound) {
			res[i].Err = err
		}
	}
}

// waitForSlot takes a slot of (tenant, dest) recording r, waiting up to
// cfg.WaitForSlot while the pair is at its limit. A paused pair, or one
// held for a stream reset, is not waited for.
func waitForSlot(ctx context.Context, cfg RedriveConfig, tenant, dest string, r tenancy.Range) (tenancy.Lease, error) {
	deadline := time.Now().Add(cfg.WaitForSlot)
	backoff := 50 * time.Millisecond
	for {
		lease, err := cfg.Slots.AcquireBatch(ctx, tenant, dest, cfg.Holder, r)
		switch {
		case err == nil:
			return lease, nil
		case errors.Is(err, tenancy.ErrPaused), errors.Is(err, tenancy.ErrStreamReset), !errors.Is(err, tenancy.ErrAtLimit):
			return tenancy.Lease{}, err
		case time.Now().After(deadline):
			return tenancy.Lease{}, fmt.Errorf("no slot of %s/%s free within %v: %w", tenant, dest, cfg.WaitForSlot, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return tenancy.Lease{}, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// redrivable returns the event of letter l to send again. A letter's
// tenant is its subject's, so an event whose body names another tenant or
// op than the subject it was stored on (events.CheckSubject: a "tenant
// mismatch" letter) is never sent again.
func redrivable(l Letter) (events.Event, error) {
	ev, err := events.Decode(l.Data)
	if err != nil {
		return ev, fmt.Errorf("%w: %v", ErrNotRedrivable, err)
	}
	if l.SourceSubject != "" {
		err = ev.CheckSubject(l.SourceSubject)
	} else if ev.Tenant != l.Tenant {
		err = fmt.Errorf("%s: the letter is tenant %q's, the event names tenant %q", events.MismatchTenant, l.Tenant, ev.Tenant)
	}
	if err != nil {
		return ev, fmt.Errorf("%w: %v", ErrNotRedrivable, err)
	}
	return ev, nil
}
