-- +goose Up

-- Time-based waits (the `wait` node) are wait states too, so that a timer is the same
-- durable deadline as an event timeout: claimed by one sweeper with SKIP LOCKED, fenced
-- by version, cancelled like any wait. wait_type tells them apart; timer holds the
-- node's rendered settings ({"for": …} | {"until": …} | {"untilTime", "timezone", "days"})
-- for the output and the operator views. A timer's statuses are the design note's:
-- scheduled, then resumed, cancelled or error (its settings could not be evaluated).
ALTER TABLE execution_wait_states
    ADD COLUMN wait_type text NOT NULL DEFAULT 'events' CHECK (wait_type IN ('events', 'timer')),
    ADD COLUMN timer jsonb;
ALTER TABLE execution_wait_states DROP CONSTRAINT execution_wait_states_status_check;
ALTER TABLE execution_wait_states ADD CONSTRAINT execution_wait_states_status_check
    CHECK (status IN ('waiting', 'scheduled', 'completed', 'resumed', 'timeout', 'failed', 'cancelled', 'error'));

-- The sweeper scans open waits of both kinds.
DROP INDEX idx_execution_wait_states_next_deadline;
CREATE INDEX idx_execution_wait_states_next_deadline ON execution_wait_states (next_deadline_at)
    WHERE status IN ('waiting', 'scheduled');

-- +goose Down
DROP INDEX idx_execution_wait_states_next_deadline;
CREATE INDEX idx_execution_wait_states_next_deadline ON execution_wait_states (next_deadline_at)
    WHERE status = 'waiting';
DELETE FROM execution_wait_states WHERE wait_type = 'timer';
ALTER TABLE execution_wait_states DROP CONSTRAINT execution_wait_states_status_check;
ALTER TABLE execution_wait_states ADD CONSTRAINT execution_wait_states_status_check
    CHECK (status IN ('waiting', 'completed', 'timeout', 'failed', 'cancelled'));
ALTER TABLE execution_wait_states DROP COLUMN timer, DROP COLUMN wait_type;
