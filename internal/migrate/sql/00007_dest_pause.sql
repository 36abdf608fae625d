-- +goose Up
-- Pause one destination of a tenant (a partner under maintenance) without
-- pausing the tenant's other destinations.
ALTER TABLE fairway.limits ADD COLUMN paused boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE fairway.limits DROP COLUMN paused;
