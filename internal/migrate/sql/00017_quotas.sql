-- +goose Up
-- Ingest quotas per tenant (pkg/tenancy Quota, docs/quotas.md). A row
-- exists only for a tenant with some quota set; 0 switches a quota off.
--
-- events_tat and bytes_tat are the token buckets' state, shared by every
-- ingest replica: the theoretical arrival time of the generic cell rate
-- algorithm. The bucket is full when it is NULL or in the past, and holds
-- burst - rate * (tat - now()) tokens otherwise; one statement per request
-- takes from both (Store.TakeQuota). Only these two columns change on the
-- hot path and none is indexed, so the updates are HOT; fillfactor leaves
-- room on the page for them.
CREATE TABLE fairway.quotas (
    tenant         text        PRIMARY KEY REFERENCES fairway.tenants (id) ON DELETE CASCADE,
    events_per_sec bigint      NOT NULL DEFAULT 0 CHECK (events_per_sec >= 0),
    events_burst   bigint      NOT NULL DEFAULT 0 CHECK (events_burst >= 0),
    bytes_per_sec  bigint      NOT NULL DEFAULT 0 CHECK (bytes_per_sec >= 0),
    bytes_burst    bigint      NOT NULL DEFAULT 0 CHECK (bytes_burst >= 0),
    max_backlog    bigint      NOT NULL DEFAULT 0 CHECK (max_backlog >= 0),
    events_tat     timestamptz,
    bytes_tat      timestamptz,
    changed_at     timestamptz NOT NULL DEFAULT now(),
    CHECK (events_per_sec = 0 OR events_burst >= 1),
    CHECK (bytes_per_sec = 0 OR bytes_burst >= 1)
) WITH (fillfactor = 50);

-- +goose Down
DROP TABLE IF EXISTS fairway.quotas;
