-- +goose Up
-- The partitions of PRODUCTS each dispatcher reads (internal/dispatch,
-- "Partitions"), as it last recorded them: NULL before it recorded any
-- or when the stream has none; fairway status shows them.
ALTER TABLE fairway.dispatchers ADD COLUMN partitions integer[];

-- +goose Down
ALTER TABLE fairway.dispatchers DROP COLUMN partitions;
