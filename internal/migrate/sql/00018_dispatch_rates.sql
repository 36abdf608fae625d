-- +goose Up
-- events_per_sec caps how many events of the tenant the dispatchers hand
-- the destination per second, on top of its slots (0: no cap).
ALTER TABLE fairway.limits ADD COLUMN events_per_sec integer NOT NULL DEFAULT 0 CHECK (events_per_sec >= 0);

-- +goose Down
ALTER TABLE fairway.limits DROP COLUMN events_per_sec;
