-- +goose Up
-- Tenancy: tenants, API tokens, per-(tenant, destination) limits, slot
-- leases, dispatch cursors and the batch log. See pkg/tenancy/doc.go.

CREATE TABLE fairway.tenants (
    id           text        PRIMARY KEY,
    display_name text        NOT NULL DEFAULT '',
    weight       integer     NOT NULL DEFAULT 1 CHECK (weight >= 1),
    paused       boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Only SHA-256 hashes of tokens are stored. tenant IS NULL for admin tokens.
CREATE TABLE fairway.api_tokens (
    hash       bytea       PRIMARY KEY,
    tenant     text        REFERENCES fairway.tenants (id) ON DELETE CASCADE,
    admin      boolean     NOT NULL DEFAULT false,
    name       text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    CHECK (admin = (tenant IS NULL))
);
CREATE INDEX api_tokens_tenant ON fairway.api_tokens (tenant);

-- One row per (tenant, destination), created with defaults on first sight.
-- weight 0 means "use the tenant's weight".
CREATE TABLE fairway.limits (
    tenant     text        NOT NULL REFERENCES fairway.tenants (id) ON DELETE CASCADE,
    dest       text        NOT NULL,
    max_slots  integer     NOT NULL CHECK (max_slots >= 0),
    weight     integer     NOT NULL DEFAULT 0 CHECK (weight >= 0),
    changed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, dest)
);

-- One row per slot: slot_no in [0, highest max_slots ever set). A slot is
-- held while expires_at >= now(); NULL or past means free. epoch is the
-- fencing token, incremented by every acquisition. Rows are never deleted
-- (except with their tenant), so (tenant, dest, slot_no, epoch) names one
-- lease forever. Only non-indexed columns change, so updates can be HOT;
-- fillfactor leaves room on the page for them.
CREATE TABLE fairway.slots (
    tenant      text        NOT NULL,
    dest        text        NOT NULL,
    slot_no     integer     NOT NULL CHECK (slot_no >= 0),
    epoch       bigint      NOT NULL DEFAULT 0,
    holder      text,
    acquired_at timestamptz,
    expires_at  timestamptz,
    from_seq    bigint,
    to_seq      bigint,
    PRIMARY KEY (tenant, dest, slot_no),
    FOREIGN KEY (tenant, dest) REFERENCES fairway.limits (tenant, dest) ON DELETE CASCADE
) WITH (fillfactor = 50);

-- The next stream sequence to dispatch per (tenant, destination). Kept out
-- of limits so dispatch (which locks the cursor row) never contends with
-- limit changes or with acquisitions reading the limit.
CREATE TABLE fairway.cursors (
    tenant   text   NOT NULL,
    dest     text   NOT NULL,
    next_seq bigint NOT NULL DEFAULT 1 CHECK (next_seq >= 1),
    PRIMARY KEY (tenant, dest),
    FOREIGN KEY (tenant, dest) REFERENCES fairway.limits (tenant, dest) ON DELETE CASCADE
) WITH (fillfactor = 50);

-- Every dispatched batch: the audit trail that two dispatchers never
-- dispatched the same range.
CREATE TABLE fairway.batches (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant      text        NOT NULL,
    dest        text        NOT NULL,
    from_seq    bigint      NOT NULL,
    to_seq      bigint      NOT NULL CHECK (to_seq >= from_seq),
    slot_no     integer     NOT NULL,
    epoch       bigint      NOT NULL,
    holder      text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX batches_tenant_dest_from ON fairway.batches (tenant, dest, from_seq);

-- +goose Down
DROP TABLE IF EXISTS fairway.batches;
DROP TABLE IF EXISTS fairway.cursors;
DROP TABLE IF EXISTS fairway.slots;
DROP TABLE IF EXISTS fairway.limits;
DROP TABLE IF EXISTS fairway.api_tokens;
DROP TABLE IF EXISTS fairway.tenants;
