-- +goose Up
-- 'destination down': a batch failed transiently for longer than the
-- sink's retry budget; it is held and probed instead of dead-lettered.
ALTER TABLE fairway.slots DROP CONSTRAINT slots_wait_kind_check;
ALTER TABLE fairway.slots ADD CONSTRAINT slots_wait_kind_check
    CHECK (wait_kind IN ('retrying', 'circuit open', 'destination down'));

-- +goose Down
UPDATE fairway.slots SET wait_kind = 'retrying' WHERE wait_kind = 'destination down';
ALTER TABLE fairway.slots DROP CONSTRAINT slots_wait_kind_check;
ALTER TABLE fairway.slots ADD CONSTRAINT slots_wait_kind_check CHECK (wait_kind IN ('retrying', 'circuit open'));
