package tenancy

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairwayhq/fairway/pkg/events"
)

// PairStatus is what the store knows about one (tenant, destination): its
// limit, effective weight, slots in use and dispatch cursor. Status views
// read it; it never creates rows.
type PairStatus struct {
	Tenant, Dest string
	MaxSlots     int
	// Weight is the destination's weight override, or the tenant's weight.
	Weight int
	// Paused: the tenant, or this destination of it, is paused.
	Paused bool
	// InUse counts the pair's live batches held, ReplayInUse its replay's
	// (the replay lane's slots, ReplaySlots of them).
	InUse, ReplayInUse, ReplaySlots int
	// NextSeq is the next PRODUCTS sequence of the tenant's normal events
	// to dispatch (1 before any); HighNext and BulkNext those of its high
	// and bulk ones.
	NextSeq, HighNext, BulkNext uint64
	// ReplayNext, when not 0 and below ReplayUntil, says the pair is
	// replaying (Rewind): its replay lane dispatches ReplayNext next and
	// ends before ReplayUntil (PairState).
	ReplayNext, ReplayUntil uint64
	// Wait is what a live lease's holder recorded with SetLeaseWait
	// (WaitCircuitOpen before WaitRetrying, then the newest), "" when no
	// held batch is waiting; WaitDetail is its detail, WaitSince when that
	// kind of wait began.
	Wait       string
	WaitDetail string
	WaitSince  time.Time
	// StreamReset, when not "", says why the pair is held for a stream
	// reset (CheckStream), since StreamResetSince: it gets no slot until
	// ResetCursors.
	StreamReset      string
	StreamResetSince time.Time
	// Rate caps the events per second dispatched for the pair (SetDestRate;
	// 0: no cap).
	Rate int
}

// NextFor is the cursor of the tenant's events of priority pr.
func (p PairStatus) NextFor(pr events.Priority) uint64 {
	return PairState{NextSeq: p.NextSeq, HighNext: p.HighNext, BulkNext: p.BulkNext}.NextFor(pr)
}

// Replaying says whether the pair's replay lane has events to dispatch.
func (p PairStatus) Replaying() bool { return p.ReplayNext != 0 && p.ReplayNext < p.ReplayUntil }

// PairStatuses returns the state of every (tenant, destination) the store
// has seen, or of one tenant's when tenant is not empty, ordered by tenant
// and destination. It is one read-only query.
func (s *Store) PairStatuses(ctx context.Context, tenant string) ([]PairStatus, error) {
	if tenant != "" {
		if err := events.ValidateTenant(tenant); err != nil {
			return nil, err
		}
	}
	rows, err := s.pool.Query(ctx, `
		SELECT l.tenant, l.dest, l.max_slots, COALESCE(NULLIF(l.weight, 0), t.weight), t.paused OR l.paused,
		       (SELECT count(*) FROM fairway.slots s WHERE s.tenant = l.tenant AND s.dest = l.dest AND s.expires_at >= now() AND s.slot_no >= 0),
		       (SELECT count(*) FROM fairway.slots s WHERE s.tenant = l.tenant AND s.dest = l.dest AND s.expires_at >= now() AND s.slot_no < 0),
		       COALESCE(c.replay_slots, 1), COALESCE(c.next_seq, 1), COALESCE(c.high_next, 1), COALESCE(c.bulk_next, 1), COALESCE(c.replay_next, 0), COALESCE(c.replay_until, 0), COALESCE(w.wait_kind, ''), COALESCE(w.wait_detail, ''), w.wait_since,
		       CASE WHEN l.stream_reset_at IS NULL THEN '' ELSE COALESCE(l.stream_reset_detail, 'stream reset') END, l.stream_reset_at,
		       l.events_per_sec
		FROM fairway.limits l
		JOIN fairway.tenants t ON t.id = l.tenant
		LEFT JOIN fairway.cursors c ON c.tenant = l.tenant AND c.dest = l.dest
		LEFT JOIN LATERAL (
			SELECT s.wait_kind, s.wait_detail, s.wait_since FROM fairway.slots s
			WHERE s.tenant = l.tenant AND s.dest = l.dest AND s.expires_at >= now()
			  AND s.wait_kind IS NOT NULL AND s.wait_epoch = s.epoch
			ORDER BY s.wait_kind = 'circuit open' DESC, s.wait_kind = 'destination down' DESC, s.wait_since DESC LIMIT 1) w ON true
		WHERE $1 = '' OR l.tenant = $1
		ORDER BY l.tenant, l.dest`, tenant)
	if err != nil {
		return nil, fmt.Errorf("pair states: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PairStatus, error) {
		var p PairStatus
		var next, high, bulk, rnext, until int64
		var since, resetSince *time.Time
		err := r.Scan(&p.Tenant, &p.Dest, &p.MaxSlots, &p.Weight, &p.Paused, &p.InUse, &p.ReplayInUse, &p.ReplaySlots, &next, &high, &bulk, &rnext, &until, &p.Wait, &p.WaitDetail, &since,
			&p.StreamReset, &resetSince, &p.Rate)
		p.NextSeq, p.HighNext, p.BulkNext = uint64(next), uint64(high), uint64(bulk)
		p.ReplayNext, p.ReplayUntil = uint64(rnext), uint64(until)
		if since != nil {
			p.WaitSince = *since
		}
		if resetSince != nil {
			p.StreamResetSince = *resetSince
		}
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("pair states: %w", err)
	}
	return out, nil
}
