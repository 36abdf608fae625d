-- +goose Up
-- Dispatchers that run side by side split the (tenant, destination) pairs
-- between them: each one heartbeats its row here and grants only the pairs
-- that rendezvous hashing gives it among the rows seen lately
-- (internal/dispatch, "Several dispatchers"). A row whose heartbeat is old
-- is a dispatcher that is gone; the others take its pairs over.
CREATE TABLE fairway.dispatchers (
    holder     text PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE fairway.dispatchers;
