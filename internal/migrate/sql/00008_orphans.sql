-- +goose Up
-- Orphaned batches: dispatched ranges whose lease ended without a release
-- by its holder (it expired and was swept or reclaimed, or the dispatcher
-- handed it back unpublished). The dispatcher re-dispatches each one under
-- a new lease. See pkg/tenancy/recover.go and docs/dispatcher.md.

CREATE TABLE fairway.orphans (
    tenant      text        NOT NULL,
    dest        text        NOT NULL,
    slot_no     integer     NOT NULL,
    epoch       bigint      NOT NULL,
    from_seq    bigint      NOT NULL,
    to_seq      bigint      NOT NULL CHECK (to_seq >= from_seq),
    holder      text        NOT NULL DEFAULT '',
    orphaned_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, dest, slot_no, epoch),
    FOREIGN KEY (tenant, dest) REFERENCES fairway.limits (tenant, dest) ON DELETE CASCADE
);
CREATE INDEX orphans_dest ON fairway.orphans (dest, orphaned_at);

-- An expired lease that carries a batch (from_seq set by Dispatch) may never
-- have been applied: its work item was never published, or its sink died.
-- Whatever ends such a lease — an acquisition reclaiming the slot (a new
-- epoch), Sweep, or a late Release (expires_at set to NULL) — first records
-- the batch here, in the same statement. Extending the lease back to life
-- keeps the epoch and a non-NULL expiry, so it does not fire. The WHEN
-- clause is evaluated without calling the function, so ordinary
-- acquisitions and releases of live leases pay almost nothing.
-- +goose StatementBegin
CREATE FUNCTION fairway.slots_keep_orphan() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO fairway.orphans (tenant, dest, slot_no, epoch, from_seq, to_seq, holder)
    VALUES (OLD.tenant, OLD.dest, OLD.slot_no, OLD.epoch, OLD.from_seq, OLD.to_seq, coalesce(OLD.holder, ''))
    ON CONFLICT DO NOTHING;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER slots_keep_orphan BEFORE UPDATE ON fairway.slots
FOR EACH ROW
WHEN (OLD.from_seq IS NOT NULL AND OLD.expires_at < now()
      AND (NEW.epoch <> OLD.epoch OR NEW.expires_at IS NULL))
EXECUTE FUNCTION fairway.slots_keep_orphan();

-- +goose Down
DROP TRIGGER IF EXISTS slots_keep_orphan ON fairway.slots;
DROP FUNCTION IF EXISTS fairway.slots_keep_orphan();
DROP TABLE IF EXISTS fairway.orphans;
