-- +goose Up
-- requests_per_sec is the most requests per second a partner takes (its
-- declared limit; 0: none). rate_tat is the earliest time the next
-- request may go (generic cell rate algorithm, one request at a time),
-- shared by every sink replica.
ALTER TABLE fairway.partners
    ADD COLUMN requests_per_sec integer NOT NULL DEFAULT 0 CHECK (requests_per_sec >= 0),
    ADD COLUMN rate_tat timestamptz;

-- +goose Down
ALTER TABLE fairway.partners DROP COLUMN rate_tat, DROP COLUMN requests_per_sec;
