-- +goose Up
-- B2B partners per tenant (sinks/b2b Registry). Each partner is its own
-- destination "b2b:<partner>" with its own slots and cursor in the tenancy
-- tables. secret is 0x00 || secret (stored as is) or 0x01 || nonce ||
-- AES-256-GCM ciphertext when FAIRWAY_SECRET_KEY is set; see
-- sinks/b2b/doc.go. ops NULL means every op.
CREATE TABLE fairway.partners (
    tenant_id         text        NOT NULL REFERENCES fairway.tenants (id) ON DELETE CASCADE,
    partner           text        NOT NULL,
    url               text        NOT NULL,
    secret            bytea       NOT NULL,
    enabled           boolean     NOT NULL DEFAULT true,
    timeout_ms        integer     NOT NULL CHECK (timeout_ms > 0),
    max_request_bytes integer     NOT NULL CHECK (max_request_bytes > 0),
    ops               text[],
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, partner)
);
CREATE INDEX partners_partner ON fairway.partners (partner);

-- +goose Down
DROP TABLE IF EXISTS fairway.partners;
