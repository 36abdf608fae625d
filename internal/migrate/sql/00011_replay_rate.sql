-- +goose Up
-- Replays are throttled so they do not take the shared machines from live
-- traffic. A rewind for replay records on the cursor row where the replayed
-- range ends (replay_until: while next_seq < replay_until the dispatcher is
-- replaying) and the replay's rate in events per second (replay_rate; NULL:
-- the dispatcher's --replay-rate, 0: not throttled). fairway.replays keeps
-- the rate each replay asked for.
ALTER TABLE fairway.cursors
    ADD COLUMN replay_until bigint,
    ADD COLUMN replay_rate  integer CHECK (replay_rate >= 0);
ALTER TABLE fairway.replays ADD COLUMN rate integer CHECK (rate >= 0);

-- +goose Down
ALTER TABLE fairway.replays DROP COLUMN rate;
ALTER TABLE fairway.cursors DROP COLUMN replay_until, DROP COLUMN replay_rate;
