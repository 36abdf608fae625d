-- +goose Up
-- Operator replays: a (tenant, destination) cursor rewound from target_seq
-- back to from_seq; the range flows again through the normal fair path.
CREATE TABLE fairway.replays (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant      text        NOT NULL,
    dest        text        NOT NULL,
    from_seq    bigint      NOT NULL,
    target_seq  bigint      NOT NULL,
    total       bigint      NOT NULL,
    state       text        NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'done', 'cancelled')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX replays_running ON fairway.replays (tenant, dest) WHERE state = 'running';

-- +goose Down
DROP TABLE IF EXISTS fairway.replays;
