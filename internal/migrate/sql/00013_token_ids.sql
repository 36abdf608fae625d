-- +goose Up
-- An API token has an id and keeps its first characters (prefix) so that an
-- operator can tell tokens apart and revoke one (`fairway tokens list`,
-- `fairway tokens revoke <id|prefix|token>`) without its secret. The prefix
-- is TokenPrefix and 8 of the token's 43 random characters; rows that
-- existed before this migration have an empty prefix (only the hash was
-- kept) and are named by their id.
ALTER TABLE fairway.api_tokens ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY;
ALTER TABLE fairway.api_tokens ADD CONSTRAINT api_tokens_id UNIQUE (id);
ALTER TABLE fairway.api_tokens ADD COLUMN prefix text NOT NULL DEFAULT '';
CREATE INDEX api_tokens_prefix ON fairway.api_tokens (prefix) WHERE prefix <> '';

-- +goose Down
DROP INDEX fairway.api_tokens_prefix;
ALTER TABLE fairway.api_tokens DROP COLUMN prefix;
ALTER TABLE fairway.api_tokens DROP COLUMN id;
