// Package replay re-sends a tenant's events to a destination through the
// pair's replay lane (tenancy.Rewind): a cursor and slots of its own, so
// the range flows again through the normal fair dispatcher path while the
// tenant's live events keep flowing beside it, and idempotent sinks make a
// second application change nothing. Replays are recorded in
// fairway.replays so their progress can be watched and they can be
// cancelled. `fairway replay` drives it.
package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Errors a caller can tell apart.
var (
	ErrUnknownTenant = errors.New("unknown tenant")
	ErrUnknownDest   = errors.New("unknown destination")
	ErrTooOld        = errors.New("older than the stream keeps")
	ErrNothing       = errors.New("nothing to replay")
	ErrNotFound      = errors.New("replay not found")
)

// States of a replay.
const (
	StateRunning   = "running"
	StateDone      = "done"
	StateCancelled = "cancelled"
)

// Request says what to replay. Exactly one of FromSeq and From is set.
type Request struct {
	Tenant string
	// Dest is a destination of the tenant, or "all".
	Dest    string
	FromSeq uint64
	From    time.Time
	// ToSeq, when not 0, ends the replay after this sequence.
	ToSeq uint64
	// Rate is how many events per second the dispatcher replays for each
	// destination: 0 for the dispatcher's --replay-rate,
	// tenancy.ReplayUnthrottled for as fast as the replay's slots allow.
	Rate int
	// Slots is how many of the replay's batches each destination may hold
	// at once, on top of the tenant's own slots (0: 1).
	Slots int
}

// Replay is one (tenant, destination) replay.
type Replay struct {
	ID           int64
	Tenant, Dest string
	// FromSeq..End()-1 is the re-dispatched range; TargetSeq is where the
	// pair's cursor was when the replay started.
	FromSeq, TargetSeq uint64
	// ToSeq is the requested end, 0 for none (or when it was at or past
	// the cursor anyway).
	ToSeq uint64
	// Total is how many of the tenant's events the range holds; Done how
	// many of them were dispatched again so far.
	Total, Done uint64
	// Rate is the requested rate (Request.Rate).
	Rate      int
	State     string
	CreatedAt time.Time
}

// Service starts, watches and cancels replays.
type Service struct {
	Store  *tenancy.Store
	Pool   *pgxpool.Pool
	JS     jetstream.JetStream
	Reader *work.Reader
	// Stream is the events stream, default PRODUCTS.
	Stream string
}

// Start rewinds the cursor of each requested destination and records the
// replays. Errors are precise: an unknown tenant or destination, a start
// older than the stream keeps (with the oldest available point), a start at
// or after the cursor (nothing to replay).
func (s *Service) Start(ctx context.Context, req Request) ([]Replay, error) {
	if err := events.ValidateTenant(req.Tenant); err != nil {
		return nil, err
	}
	if (req.FromSeq == 0) == req.From.IsZero() {
		return nil, errors.New("replay: give exactly one of a start sequence and a start time")
	}
	if req.Rate < tenancy.ReplayUnthrottled {
		return nil, fmt.Errorf("replay: rate %d: want events per second, 0 for the dispatcher's default or %d for unthrottled", req.Rate, tenancy.ReplayUnthrottled)
	}
	if req.Slots < 0 || req.Slots > tenancy.ReplaySlotsMax {
		return nil, fmt.Errorf("replay: %d slots: want 1..%d (0 for 1)", req.Slots, tenancy.ReplaySlotsMax)
	}
	if req.ToSeq > 0 && req.FromSeq > req.ToSeq {
		return nil, fmt.Errorf("replay: end sequence %d is before the start %d", req.ToSeq, req.FromSeq)
	}
	pairs, err := s.Store.PairStatuses(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	if len(pairs) == 0 {
		if _, err := s.Store.Tenant(ctx, req.Tenant); err != nil {
			return nil, fmt.Errorf("replay: %w %q", ErrUnknownTenant, req.Tenant)
		}
		return nil, fmt.Errorf("replay: %w: tenant %s has no destinations yet (nothing was ever dispatched for it)", ErrUnknownDest, req.Tenant)
	}
	var dests []string
	for _, p := range pairs {
		dests = append(dests, p.Dest)
	}
	if req.Dest != "all" {
		if !slices.Contains(dests, req.Dest) {
			return nil, fmt.Errorf("replay: %w %q for tenant %s (it has: %s, or all)", ErrUnknownDest, req.Dest, req.Tenant, strings.Join(dests, ", "))
		}
		dests = []string{req.Dest}
	}
	from, err := s.startSeq(ctx, req)
	if err != nil {
		return nil, err
	}
	if req.ToSeq > 0 && from > req.ToSeq {
		return nil, fmt.Errorf("replay: %w: tenant %s's first event since the start is sequence %d, after the end %d",
			ErrNothing, req.Tenant, from, req.ToSeq)
	}
	var out []Replay
	for _, d := range dests {
		r, err := s.start(ctx, req, d, from)
		if errors.Is(err, ErrNothing) && req.Dest == "all" {
			continue // this destination has not reached the start yet
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("replay: %w: no destination of %s has dispatched past sequence %d yet", ErrNothing, req.Tenant, from)
	}
	return out, nil
}

// startSeq turns the request's start into a sequence and checks the stream
// still holds it.
func (s *Service) startSeq(ctx context.Context, req Request) (uint64, error) {
	name := s.Stream
	if name == "" {
		name = events.StreamName
	}
	st, err := s.JS.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("replay: stream %s: %w", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("replay: stream %s: %w", name, err)
	}
	first, firstTime := info.State.FirstSeq, info.State.FirstTime
	keeps := info.Config.MaxAge
	if req.FromSeq > 0 {
		if req.FromSeq < first {
			return 0, fmt.Errorf("replay: sequence %d is %w (%s keeps %s; its oldest event is sequence %d from %s)",
				req.FromSeq, ErrTooOld, name, keeps, first, firstTime.UTC().Format(time.RFC3339))
		}
		return req.FromSeq, nil
	}
	if req.From.Before(firstTime) && info.State.Msgs > 0 && first > 1 {
		return 0, fmt.Errorf("replay: %s is %w (%s keeps %s; its oldest event is from %s, sequence %d)",
			req.From.UTC().Format(time.RFC3339), ErrTooOld, name, keeps, firstTime.UTC().Format(time.RFC3339), first)
	}
	m, ok, err := s.Reader.FirstAt(ctx, req.Tenant, req.From)
	if err != nil {
		return 0, fmt.Errorf("replay: %w", err)
	}
	if !ok {
		return 0, fmt.Errorf("replay: %w: tenant %s has no events since %s", ErrNothing, req.Tenant, req.From.UTC().Format(time.RFC3339))
	}
	return m.Seq, nil
}

// End is the sequence after the replayed range.
func (r Replay) End() uint64 {
	if r.ToSeq > 0 {
		return min(r.ToSeq+1, r.TargetSeq)
	}
	return r.TargetSeq
}

func (s *Service) start(ctx context.Context, req Request, dest string, from uint64) (Replay, error) {
	tenant, to, rate := req.Tenant, req.ToSeq, req.Rate
	target, err := s.Store.Rewind(ctx, tenancy.Rewind{Tenant: tenant, Dest: dest, From: from, Last: to, Rate: rate, Slots: req.Slots})
	if errors.Is(err, tenancy.ErrInvalidArgument) {
		return Replay{}, fmt.Errorf("replay %s/%s: %w: its cursor is at %d, not past %d", tenant, dest, ErrNothing, target, from)
	}
	if err != nil {
		return Replay{}, err
	}
	r := Replay{Tenant: tenant, Dest: dest, FromSeq: from, TargetSeq: target, Rate: rate, State: StateRunning}
	if to > 0 && to+1 < target {
		r.ToSeq = to
	}
	r.Total, err = s.Reader.Between(ctx, tenant, from, r.End())
	if err != nil {
		return Replay{}, err
	}
	var toSeq *int64
	if r.ToSeq > 0 {
		v := int64(r.ToSeq)
		toSeq = &v
	}
	err = s.Pool.QueryRow(ctx, `INSERT INTO fairway.replays (tenant, dest, from_seq, target_seq, to_seq, total, rate)
		VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $7::int = 0 THEN NULL WHEN $7::int < 0 THEN 0 ELSE $7::int END) RETURNING id, created_at`,
		tenant, dest, int64(from), int64(target), toSeq, int64(r.Total), rate).Scan(&r.ID, &r.CreatedAt)
	if err != nil {
		return r, fmt.Errorf("record replay %s/%s: %w", tenant, dest, err)
	}
	return r, nil
}

// List returns replays, newest first: running ones with fresh progress
// (a replay whose cursor passed its target is marked done).
func (s *Service) List(ctx context.Context, tenant string, running bool) ([]Replay, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id, tenant, dest, from_seq, target_seq, COALESCE(to_seq, 0), total,
			CASE WHEN rate = 0 THEN -1 ELSE COALESCE(rate, 0) END, state, created_at
		FROM fairway.replays WHERE ($1 = '' OR tenant = $1) AND (NOT $2 OR state = 'running')
		ORDER BY id DESC LIMIT 100`, tenant, running)
	if err != nil {
		return nil, fmt.Errorf("list replays: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Replay, error) {
		var x Replay
		var from, target, to, total int64
		err := r.Scan(&x.ID, &x.Tenant, &x.Dest, &from, &target, &to, &total, &x.Rate, &x.State, &x.CreatedAt)
		x.FromSeq, x.TargetSeq, x.ToSeq, x.Total = uint64(from), uint64(target), uint64(to), uint64(total)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("list replays: %w", err)
	}
	for i := range list {
		if err := s.refresh(ctx, &list[i]); err != nil {
			return nil, err
		}
	}
	return list, nil
}

// Get returns one replay with fresh progress.
func (s *Service) Get(ctx context.Context, id int64) (Replay, error) {
	list, err := s.List(ctx, "", false)
	if err != nil {
		return Replay{}, err
	}
	for _, r := range list {
		if r.ID == id {
			return r, nil
		}
	}
	return Replay{}, fmt.Errorf("replay %d: %w", id, ErrNotFound)
}

// refresh computes Done from the replay lane's cursor and marks a
// finished replay done.
func (s *Service) refresh(ctx context.Context, r *Replay) error {
	if r.State != StateRunning {
		if r.State == StateDone {
			r.Done = r.Total
		}
		return nil
	}
	ps, err := s.Store.PairStatuses(ctx, r.Tenant)
	if err != nil {
		return err
	}
	next := r.End() // a pair gone, or its lane ended
	for _, p := range ps {
		if p.Dest == r.Dest && p.Replaying() {
			next = p.ReplayNext
		}
	}
	if next >= r.End() {
		r.Done, r.State = r.Total, StateDone
		_, err := s.Pool.Exec(ctx, `UPDATE fairway.replays SET state = 'done', finished_at = now() WHERE id = $1 AND state = 'running'`, r.ID)
		return err
	}
	left, err := s.Reader.Between(ctx, r.Tenant, max(next, r.FromSeq), r.End())
	if err != nil {
		return err
	}
	r.Done = r.Total - min(r.Total, left)
	return nil
}

// Cancel ends a running replay: its pair's replay lane dispatches nothing
// more (the range left had been applied before), and the replay is marked
// cancelled. Replays of one pair share its lane (tenancy.Rewind), so the
// cancel ends the others running there too; they show as done.
func (s *Service) Cancel(ctx context.Context, id int64) (Replay, error) {
	r, err := s.Get(ctx, id)
	if err != nil {
		return r, err
	}
	if r.State != StateRunning {
		return r, fmt.Errorf("replay %d is already %s", id, r.State)
	}
	if _, err := s.Store.EndReplay(ctx, r.Tenant, r.Dest); err != nil {
		return r, err
	}
	if _, err := s.Pool.Exec(ctx, `UPDATE fairway.replays SET state = 'cancelled', finished_at = now() WHERE id = $1`, id); err != nil {
		return r, fmt.Errorf("cancel replay %d: %w", id, err)
	}
	r.State = StateCancelled
	return r, nil
}
