-- +goose Up
-- Why a held lease is not finishing. The sink runner holding a lease
-- records it when it backs off: 'retrying' (a failing batch) or
-- 'circuit open' (the destination's circuit breaker refuses calls), with
-- the last error in wait_detail. A note belongs to the lease of epoch
-- wait_epoch only: a new acquisition (a new epoch) makes it stale without
-- a write, and status views read notes of live leases only
-- (pkg/tenancy PairStatuses, `fairway status`). The columns are not
-- indexed, so the update stays HOT.
ALTER TABLE fairway.slots
    ADD COLUMN wait_kind   text CHECK (wait_kind IN ('retrying', 'circuit open')),
    ADD COLUMN wait_detail text,
    ADD COLUMN wait_epoch  bigint,
    ADD COLUMN wait_since  timestamptz;

-- +goose Down
ALTER TABLE fairway.slots
    DROP COLUMN wait_kind,
    DROP COLUMN wait_detail,
    DROP COLUMN wait_epoch,
    DROP COLUMN wait_since;
