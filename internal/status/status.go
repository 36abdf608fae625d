// Package status answers "what is every tenant waiting for?": per tenant
// and destination, the backlog behind the dispatch cursor, the age of the
// oldest waiting event, slots in use against the limit, the weight, dead
// letters, and why work is waiting. `fairway status` prints it; the
// dashboard serves it.
package status

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Reasons work waits (or does not).
const (
	ReasonIdle        = "idle"                 // nothing behind the cursor, nothing running
	ReasonApplying    = "applying"             // nothing left to dispatch; batches are being applied
	ReasonDispatching = "dispatching"          // backlog and a free slot: the dispatcher will take it
	ReasonAtLimit     = "at slot limit"        // backlog, every slot busy
	ReasonPaused      = "paused"               // the tenant is paused
	ReasonCircuitOpen = "partner circuit open" // a held batch waits for the destination's circuit breaker
	ReasonRetrying    = "retrying"             // a held batch failed and is being retried with backoff
	ReasonDown        = "destination down"     // a held batch has failed for longer than the retry budget; probed until the destination is back
	ReasonLimitZero   = "limit 0"              // max_slots is 0: dispatch is switched off
	ReasonReplaying   = "replaying"            // a replay is dispatched again in its own lane, paced by its rate; nothing live waits
	ReasonRateLimited = "rate limited"         // more than a second's worth waits behind the pair's dispatch rate
	// ReasonStreamReset: the cursor does not belong to stream PRODUCTS (it
	// was recreated or restored); nothing is dispatched until `fairway
	// cursors reset` (pkg/tenancy CheckStream).
	ReasonStreamReset = "stream reset"
)

// Row is the status of one (tenant, destination).
type Row struct {
	Tenant, Dest string
	Backlog      uint64        // events behind the dispatch cursors (of each priority); for a pair held for a stream reset, the tenant's events in the stream
	OldestAge    time.Duration // age of the oldest event behind the cursor (0 if none)
	InUse, Limit int
	Weight       int
	Paused       bool
	DeadLetters  uint64
	NextSeq      uint64
	// Replaying: a replay runs in the pair's replay lane; ReplayLeft of
	// the tenant's events are left to it, and it holds ReplayInUse of its
	// ReplaySlots slots.
	Replaying                bool
	ReplayLeft               uint64 `json:",omitempty"`
	ReplayInUse, ReplaySlots int    `json:",omitempty"`
	// Rate caps the events per second dispatched for the pair (0: none).
	Rate   int `json:",omitempty"`
	Reason string
	// WaitDetail is what the sink said about a batch that is retrying or
	// waiting for an open circuit (the last error), or why the pair is
	// held for a stream reset, else "".
	WaitDetail string `json:",omitempty"`
	// ExpiresIn is how long the oldest waiting event has left before
	// PRODUCTS' MaxAge drops it (0: no backlog, or no MaxAge). Expiring
	// says it has less than ExpiryWarning of MaxAge left: a destination
	// down (or a pair held) for that long loses events.
	ExpiresIn time.Duration `json:",omitempty"`
	Expiring  bool          `json:",omitempty"`
}

// ExpiryWarning is the part of PRODUCTS' MaxAge left to a pair's oldest
// waiting event below which its row is Expiring.
const ExpiryWarning = 0.25

// Pairs is what status needs from pkg/tenancy.
type Pairs interface {
	PairStatuses(ctx context.Context, tenant string) ([]tenancy.PairStatus, error)
}

// Source reads status from PostgreSQL (limits, slots, cursors) and JetStream
// (backlog by direct get, dead letters by DLQ subject counts).
type Source struct {
	Pairs  Pairs
	Reader *work.Reader
	JS     jetstream.JetStream
	// Dispatchers lists the dispatchers for Partitions. Optional
	// otherwise.
	Dispatchers Dispatchers
	// DLQStream is the dead-letter stream's name. Default "DLQ".
	DLQStream string
	Now       func() time.Time
}

// Rows returns one Row per known (tenant, destination), or only tenant's.
func (s *Source) Rows(ctx context.Context, tenant string) ([]Row, error) {
	pairs, err := s.Pairs.PairStatuses(ctx, tenant)
	if err != nil {
		return nil, err
	}
	dead, err := s.deadLetters(ctx, tenant)
	if err != nil {
		return nil, err
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	maxAge, err := s.maxAge(ctx)
	if err != nil {
		return nil, err
	}
	others, err := s.otherPriorities(ctx)
	if err != nil {
		return nil, err
	}
	rows := make([]Row, 0, len(pairs))
	for _, p := range pairs {
		r := Row{Tenant: p.Tenant, Dest: p.Dest, InUse: p.InUse, Limit: p.MaxSlots, Weight: p.Weight,
			Paused: p.Paused, NextSeq: p.NextSeq, Replaying: p.Replaying(), Rate: p.Rate, DeadLetters: dead[p.Dest+" "+p.Tenant]}
		r.ReplayInUse = p.ReplayInUse // batches of a replay may still apply after it dispatched its last
		if r.Replaying {
			r.ReplaySlots = p.ReplaySlots
			if r.ReplayLeft, err = s.Reader.Between(ctx, p.Tenant, p.ReplayNext, p.ReplayUntil); err != nil {
				return nil, fmt.Errorf("replay of %s/%s: %w", p.Tenant, p.Dest, err)
			}
		}
		switch p.Wait {
		case tenancy.WaitCircuitOpen:
			r.Reason, r.WaitDetail = ReasonCircuitOpen, p.WaitDetail
		case tenancy.WaitRetrying:
			r.Reason, r.WaitDetail = ReasonRetrying, p.WaitDetail
		case tenancy.WaitDown:
			r.Reason, r.WaitDetail = ReasonDown, p.WaitDetail
		}
		// The backlog: the tenant's events of each priority from that
		// priority's cursor. A pair held for a stream reset has cursors of
		// the old stream: what waits for it is every event of the tenant
		// the stream holds, what `fairway cursors reset --to first`
		// dispatches.
		var oldest time.Time
		for _, pr := range events.Priorities {
			from, only := p.NextFor(pr), pr
			if pr != events.PriorityNormal && others != nil && !others[p.Tenant+" "+string(pr)] {
				continue // the stream holds none of the tenant's events of pr
			}
			if p.StreamReset != "" {
				if pr != events.PriorityNormal {
					continue
				}
				from, only = 1, ""
			}
			b, err := s.Reader.Next(ctx, p.Tenant, from, 0, work.ReadOptions{Max: 1, Priority: only})
			if err != nil {
				return nil, fmt.Errorf("backlog of %s/%s: %w", p.Tenant, p.Dest, err)
			}
			if len(b.Msgs) > 0 {
				r.Backlog += 1 + b.Pending
				if oldest.IsZero() || b.Msgs[0].Time.Before(oldest) {
					oldest = b.Msgs[0].Time
				}
			}
		}
		if r.Backlog > 0 {
			r.OldestAge = max(0, now().Sub(oldest))
			if maxAge > 0 {
				r.ExpiresIn = max(time.Nanosecond, maxAge-r.OldestAge)
				r.Expiring = float64(r.ExpiresIn) < ExpiryWarning*float64(maxAge)
			}
		}
		if r.Reason == "" || r.Paused {
			r.Reason = reason(r)
		}
		if p.StreamReset != "" {
			r.Reason, r.WaitDetail = ReasonStreamReset, p.StreamReset
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func reason(r Row) string {
	switch {
	case r.Paused:
		return ReasonPaused
	case r.Backlog == 0 && r.Replaying:
		return ReasonReplaying
	case r.Backlog == 0 && r.InUse > 0:
		return ReasonApplying
	case r.Backlog == 0:
		return ReasonIdle
	case r.Limit == 0:
		return ReasonLimitZero
	case r.InUse >= r.Limit:
		return ReasonAtLimit
	case r.Replaying:
		return ReasonReplaying
	case r.Rate > 0 && r.Backlog > uint64(r.Rate):
		return ReasonRateLimited
	default:
		return ReasonDispatching
	}
}

// otherPriorities says, as "<tenant> <priority>", which tenants' high and
// bulk events the stream holds (one stream info request), so that a
// tenant without any is read once, not once per priority; nil when there
// is no JetStream to ask (every priority is read).
func (s *Source) otherPriorities(ctx context.Context) (map[string]bool, error) {
	if s.JS == nil {
		return nil, nil
	}
	name := s.Reader.Stream()
	st, err := s.JS.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	layout, err := s.Reader.Layout(ctx)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(layout.MarkedSubjects()))
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	out := map[string]bool{}
	for subj := range info.State.Subjects {
		if tenant, _, p, err := events.ParseSubject(subj); err == nil {
			out[tenant+" "+string(p)] = true
		}
	}
	return out, nil
}

// maxAge is stream PRODUCTS' MaxAge (0: none, or no JetStream to ask).
func (s *Source) maxAge(ctx context.Context) (time.Duration, error) {
	if s.JS == nil {
		return 0, nil
	}
	name := s.Reader.Stream()
	st, err := s.JS.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", name, err)
	}
	return st.CachedInfo().Config.MaxAge, nil
}

// deadLetters counts DLQ messages per "<dest> <tenant>" (subject
// dlq.<dest>.<tenant>). A missing DLQ stream means none.
func (s *Source) deadLetters(ctx context.Context, tenant string) (map[string]uint64, error) {
	out := map[string]uint64{}
	if s.JS == nil {
		return out, nil
	}
	name := s.DLQStream
	if name == "" {
		name = "DLQ"
	}
	st, err := s.JS.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	filter := "dlq.>"
	if tenant != "" {
		filter = "dlq.*." + tenant
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	for subj, n := range info.State.Subjects {
		parts := strings.SplitN(subj, ".", 3)
		if len(parts) == 3 {
			out[parts[1]+" "+parts[2]] += n
		}
	}
	return out, nil
}
