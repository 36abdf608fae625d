package tenancy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Kinds of wait a lease holder records with SetLeaseWait.
const (
	// WaitRetrying: the holder is backing off before retrying a failing
	// batch.
	WaitRetrying = "retrying"
	// WaitCircuitOpen: the destination's circuit breaker refuses calls (a
	// B2B partner failing); the holder waits for it to let a call through.
	WaitCircuitOpen = "circuit open"
	// WaitDown: the batch has failed transiently for longer than the
	// holder's retry budget; it is held and probed until the destination
	// is back (or the holder's longest hold ends).
	WaitDown = "destination down"
)

// waitDetailMax bounds a recorded wait detail, in bytes.
const waitDetailMax = 500

// SetLeaseWait records on a held lease why its batch is not finishing:
// kind is WaitRetrying or WaitCircuitOpen and detail says more (the last
// error); kind "" clears the note. The note lives as long as the lease:
// release or a new acquisition of the slot ends it. ErrStaleLease when the
// slot is no longer held under token.
func (s *Store) SetLeaseWait(ctx context.Context, leaseID string, token int64, kind, detail string) error {
	tenant, dest, slot, idToken, err := ParseLeaseID(leaseID)
	if err != nil {
		return err
	}
	if idToken != token {
		return fmt.Errorf("lease wait %s: token %d: %w", leaseID, token, ErrStaleLease)
	}
	switch kind {
	case "", WaitRetrying, WaitCircuitOpen, WaitDown:
	default:
		return fmt.Errorf("lease wait %s: %w: kind %q", leaseID, ErrInvalidArgument, kind)
	}
	if len(detail) > waitDetailMax {
		detail = strings.ToValidUTF8(detail[:waitDetailMax], "") + "…"
	}
	var one int
	err = s.pool.QueryRow(ctx, `UPDATE fairway.slots SET wait_kind = NULLIF($5, ''), wait_detail = NULLIF($6, ''),
		wait_since = CASE WHEN wait_epoch = $4 AND wait_kind = $5 THEN wait_since ELSE now() END, wait_epoch = $4
		WHERE tenant = $1 AND dest = $2 AND slot_no = $3 AND epoch = $4 AND expires_at IS NOT NULL
		RETURNING 1`, tenant, dest, slot, token, kind, detail).Scan(&one)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("lease wait %s: %w", leaseID, ErrStaleLease)
	case err != nil:
		return fmt.Errorf("lease wait %s: %w", leaseID, err)
	}
	return nil
}
