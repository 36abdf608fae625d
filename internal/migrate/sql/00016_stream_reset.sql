-- +goose Up
-- Cursors that cannot be right for the stream they point into. A cursor is
-- a sequence of PRODUCTS; when the stream is recreated (a new, empty
-- stream: the NATS server was replaced) or restored from an older backup,
-- cursors point past its end, and dispatching on from them would skip every
-- event until the new stream reached them. The dispatcher holds such a pair
-- instead (pkg/tenancy CheckStream): stream_reset_at is when, and
-- stream_reset_detail why. No slot of a held pair is handed out
-- (candidateSQL), `fairway status` shows `stream reset`, and `fairway
-- cursors reset` moves the cursor (to the stream's first event, or past its
-- last) and clears the hold.
ALTER TABLE fairway.limits
    ADD COLUMN stream_reset_at     timestamptz,
    ADD COLUMN stream_reset_detail text;

-- The streams the cursors point into, by the creation time JetStream
-- reports for them: a recreated stream does not share it with the one it
-- replaces (a restored stream keeps its original's).
CREATE TABLE fairway.streams (
    name       text        PRIMARY KEY,
    created_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE IF EXISTS fairway.streams;
ALTER TABLE fairway.limits DROP COLUMN stream_reset_at, DROP COLUMN stream_reset_detail;
