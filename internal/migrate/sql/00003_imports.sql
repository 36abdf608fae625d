-- +goose Up
-- CSV catalog imports accepted by the ingest service. The uploaded file is
-- spooled to the ingest node's disk; this row tracks the job so any client
-- can poll it, and lets the node that owns it resume after a restart.
CREATE TABLE fairway.imports (
    id            uuid PRIMARY KEY,
    tenant_id     text        NOT NULL,
    node          text        NOT NULL,
    status        text        NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'succeeded_with_errors')),
    spool_path    text        NOT NULL,
    bytes         bigint      NOT NULL DEFAULT 0,
    rows_total    bigint      NOT NULL DEFAULT 0,
    rows_ok       bigint      NOT NULL DEFAULT 0,
    rows_failed   bigint      NOT NULL DEFAULT 0,
    rows_dup      bigint      NOT NULL DEFAULT 0,
    errors        jsonb       NOT NULL DEFAULT '[]'::jsonb,
    failure       text,
    request_id    text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    started_at    timestamptz,
    finished_at   timestamptz
);
CREATE INDEX imports_tenant_created ON fairway.imports (tenant_id, created_at DESC);
CREATE INDEX imports_unfinished ON fairway.imports (node) WHERE status IN ('queued', 'running');

-- +goose Down
DROP TABLE IF EXISTS fairway.imports;
