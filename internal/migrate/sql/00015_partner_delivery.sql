-- +goose Up
-- How each B2B partner takes its events (sinks/b2b Partner.Transform and
-- Partner.MaxEvents) and the log of the requests made to it
-- (sinks/b2b DeliveryLog).
--
-- filter_expr and map_expr are CEL expressions, checked when they are set;
-- NULL means none. max_events bounds the events of one request; 0 means
-- no bound but the partner's max request size.
ALTER TABLE fairway.partners
    ADD COLUMN filter_expr text,
    ADD COLUMN map_expr    text,
    ADD COLUMN max_events  integer NOT NULL DEFAULT 0 CHECK (max_events >= 0);

-- One row per request attempt. The sink writes them in batches and keeps
-- the newest rows of each (tenant, partner) (sinks/b2b
-- DeliveryLogKeepDefault); status 0 means no answer (timeout, refused
-- connection). Rows go with their partner.
CREATE TABLE fairway.partner_deliveries (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id  text        NOT NULL,
    partner    text        NOT NULL,
    at         timestamptz NOT NULL,
    webhook_id text        NOT NULL,
    events     integer     NOT NULL,
    status     integer     NOT NULL,
    latency_us bigint      NOT NULL,
    error      text        NOT NULL DEFAULT '',
    FOREIGN KEY (tenant_id, partner) REFERENCES fairway.partners (tenant_id, partner) ON DELETE CASCADE
);
CREATE INDEX partner_deliveries_recent ON fairway.partner_deliveries (tenant_id, partner, id DESC);

-- +goose Down
DROP TABLE IF EXISTS fairway.partner_deliveries;
ALTER TABLE fairway.partners
    DROP COLUMN filter_expr,
    DROP COLUMN map_expr,
    DROP COLUMN max_events;
