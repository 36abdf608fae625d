-- +goose Up
-- Replays with an end (fairway replay --to-seq M). A bounded rewind sets
-- stop_after = M and resume_at = where the cursor was; the first cursor
-- move past stop_after (the dispatch of the batch that holds M, a cancel)
-- makes the cursor jump to resume_at and clears both, so the range after
-- M, applied before the replay, is not sent again. The WHEN clause is
-- evaluated without calling the function, so ordinary dispatches (both
-- columns NULL) pay almost nothing.
ALTER TABLE fairway.cursors
    ADD COLUMN stop_after bigint,
    ADD COLUMN resume_at  bigint;
ALTER TABLE fairway.replays ADD COLUMN to_seq bigint;

-- +goose StatementBegin
CREATE FUNCTION fairway.cursors_end_replay() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.next_seq := GREATEST(NEW.next_seq, NEW.resume_at);
    NEW.stop_after := NULL;
    NEW.resume_at := NULL;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER cursors_end_replay BEFORE UPDATE ON fairway.cursors
FOR EACH ROW
WHEN (NEW.stop_after IS NOT NULL AND NEW.next_seq > NEW.stop_after)
EXECUTE FUNCTION fairway.cursors_end_replay();

-- +goose Down
DROP TRIGGER IF EXISTS cursors_end_replay ON fairway.cursors;
DROP FUNCTION IF EXISTS fairway.cursors_end_replay();
ALTER TABLE fairway.replays DROP COLUMN to_seq;
ALTER TABLE fairway.cursors DROP COLUMN stop_after, DROP COLUMN resume_at;
