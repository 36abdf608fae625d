-- +goose Up
-- How each B2B partner's requests are signed (sinks/b2b Signing), and the
-- previous secret that keeps signing during a rotation. Partners that
-- exist now keep the scheme they verify today, 'fairway'; the Registry
-- names the scheme of every partner it adds, so the column has no default.
-- previous_secret has the format of secret; it signs until
-- previous_secret_until.
ALTER TABLE fairway.partners
    ADD COLUMN signing text NOT NULL DEFAULT 'fairway',
    ADD COLUMN previous_secret bytea,
    ADD COLUMN previous_secret_until timestamptz;
ALTER TABLE fairway.partners ALTER COLUMN signing DROP DEFAULT;

-- +goose Down
ALTER TABLE fairway.partners
    DROP COLUMN signing,
    DROP COLUMN previous_secret,
    DROP COLUMN previous_secret_until;
