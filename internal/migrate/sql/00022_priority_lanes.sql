-- +goose Up
-- Priority lanes. A tenant's events of each priority (high, normal, bulk:
-- pkg/events Priority) are dispatched to each destination from a cursor
-- of their own: next_seq for normal, high_next and bulk_next for the
-- others, so its high events go before its normal and bulk ones whatever
-- their order in the stream. The slots stay the pair's: a lease records
-- the priority of the events its batch holds (priority: 0 high, 1 normal,
-- 2 bulk; NULL every event of the tenant in the range: a replay's batch, a
-- redrive's, one dispatched before this migration), and so does an orphan,
-- so that its range is read again the same way.
ALTER TABLE fairway.cursors
    ADD COLUMN high_next bigint CHECK (high_next >= 1),
    ADD COLUMN bulk_next bigint CHECK (bulk_next >= 1);
-- No event had a priority before: both lanes start where the pair is.
UPDATE fairway.cursors SET high_next = next_seq, bulk_next = next_seq;
ALTER TABLE fairway.cursors
    ALTER COLUMN high_next SET NOT NULL, ALTER COLUMN high_next SET DEFAULT 1,
    ALTER COLUMN bulk_next SET NOT NULL, ALTER COLUMN bulk_next SET DEFAULT 1;
ALTER TABLE fairway.slots ADD COLUMN priority smallint CHECK (priority BETWEEN 0 AND 2);
ALTER TABLE fairway.orphans ADD COLUMN priority smallint CHECK (priority BETWEEN 0 AND 2);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fairway.slots_keep_orphan() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO fairway.orphans (tenant, dest, slot_no, epoch, from_seq, to_seq, holder, priority)
    VALUES (OLD.tenant, OLD.dest, OLD.slot_no, OLD.epoch, OLD.from_seq, OLD.to_seq, coalesce(OLD.holder, ''), OLD.priority)
    ON CONFLICT DO NOTHING;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fairway.slots_keep_orphan() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO fairway.orphans (tenant, dest, slot_no, epoch, from_seq, to_seq, holder)
    VALUES (OLD.tenant, OLD.dest, OLD.slot_no, OLD.epoch, OLD.from_seq, OLD.to_seq, coalesce(OLD.holder, ''))
    ON CONFLICT DO NOTHING;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
ALTER TABLE fairway.orphans DROP COLUMN priority;
ALTER TABLE fairway.slots DROP COLUMN priority;
ALTER TABLE fairway.cursors DROP COLUMN high_next, DROP COLUMN bulk_next;
