-- +goose Up
CREATE SCHEMA IF NOT EXISTS fairway;

-- +goose Down
DROP SCHEMA IF EXISTS fairway CASCADE;
