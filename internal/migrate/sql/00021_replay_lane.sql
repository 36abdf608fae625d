-- +goose Up
-- The replay lane. A replay no longer rewinds the pair's cursor: it has a
-- cursor of its own, replay_next, that runs up to replay_until (exclusive),
-- and slots of its own, the slot rows numbered -1 down to -replay_slots, so
-- the pair's live events keep their cursor (next_seq) and their slots
-- (0 .. max_slots-1) while it replays. The lane runs while replay_next <
-- replay_until; replay_rate paces it as before.
ALTER TABLE fairway.cursors
    ADD COLUMN replay_next  bigint,
    ADD COLUMN replay_slots integer NOT NULL DEFAULT 1 CHECK (replay_slots >= 1);
ALTER TABLE fairway.slots DROP CONSTRAINT slots_slot_no_check;

-- A replay under way rewound the live cursor: it moves to the lane, and the
-- live cursor goes back to where the replay found it. A bounded replay
-- (stop_after, resume_at) ends at stop_after.
DROP TRIGGER IF EXISTS cursors_end_replay ON fairway.cursors;
DROP FUNCTION IF EXISTS fairway.cursors_end_replay();
UPDATE fairway.cursors SET
    replay_next  = next_seq,
    next_seq     = GREATEST(replay_until, COALESCE(resume_at, 0)),
    replay_until = CASE WHEN stop_after IS NULL THEN replay_until ELSE LEAST(stop_after + 1, replay_until) END
WHERE replay_until > next_seq;
INSERT INTO fairway.slots (tenant, dest, slot_no)
SELECT tenant, dest, -1 FROM fairway.cursors WHERE replay_next < replay_until
ON CONFLICT DO NOTHING;
ALTER TABLE fairway.cursors DROP COLUMN stop_after, DROP COLUMN resume_at;

-- +goose Down
ALTER TABLE fairway.cursors
    ADD COLUMN stop_after bigint,
    ADD COLUMN resume_at  bigint;
-- A lane under way becomes a rewound live cursor again.
UPDATE fairway.cursors SET
    stop_after   = CASE WHEN replay_until < next_seq THEN replay_until - 1 END,
    resume_at    = CASE WHEN replay_until < next_seq THEN next_seq END,
    replay_until = next_seq,
    next_seq     = replay_next
WHERE replay_next < replay_until;

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

DELETE FROM fairway.slots WHERE slot_no < 0;
ALTER TABLE fairway.slots ADD CONSTRAINT slots_slot_no_check CHECK (slot_no >= 0);
ALTER TABLE fairway.cursors DROP COLUMN replay_next, DROP COLUMN replay_slots;
