-- +goose Up

-- Recovery. A failed execution can be redriven: it continues from its failed nodes, and
-- counts how often that happened and when it last did. An execution can be restarted as
-- a new one of the same workflow; the two are linked both ways, so an operator can follow
-- the line from either end. No foreign keys: retention purges each on its own.
ALTER TABLE executions
    ADD COLUMN redrive_count  integer     NOT NULL DEFAULT 0,
    ADD COLUMN redriven_at    timestamptz,
    ADD COLUMN restarted_from uuid,
    ADD COLUMN restarted_as   uuid;

-- A dead letter or an unmatched event is resolved once: replayed into an execution
-- (detail: what the replay did there) or dismissed by an operator (detail: why).
-- Retention purges resolved rows like the others.
ALTER TABLE event_dead_letters
    ADD COLUMN resolution        text CHECK (resolution IN ('replayed', 'dismissed')),
    ADD COLUMN resolution_detail text,
    ADD COLUMN resolved_at       timestamptz;
ALTER TABLE unmatched_events
    ADD COLUMN resolution        text CHECK (resolution IN ('replayed', 'dismissed')),
    ADD COLUMN resolution_detail text,
    ADD COLUMN resolved_at       timestamptz;

-- +goose Down
ALTER TABLE unmatched_events DROP COLUMN resolved_at, DROP COLUMN resolution_detail, DROP COLUMN resolution;
ALTER TABLE event_dead_letters DROP COLUMN resolved_at, DROP COLUMN resolution_detail, DROP COLUMN resolution;
ALTER TABLE executions
    DROP COLUMN restarted_as,
    DROP COLUMN restarted_from,
    DROP COLUMN redriven_at,
    DROP COLUMN redrive_count;
