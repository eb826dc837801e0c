-- +goose Up

-- Deadlines. expires_at stays the node's overall deadline (the design note's column);
-- next_deadline_at is the earliest deadline still ahead of a waiting state — an event's
-- own timeout or the overall one — and is what the sweeper scans. Events that passed
-- their own deadline without arriving are listed in timed_out_events: they no longer
-- count when they turn up, and the node output reports them.
ALTER TABLE execution_wait_states
    ADD COLUMN next_deadline_at timestamptz,
    ADD COLUMN timed_out_events jsonb NOT NULL DEFAULT '[]';
UPDATE execution_wait_states SET next_deadline_at = expires_at;
ALTER TABLE execution_wait_states ALTER COLUMN next_deadline_at SET NOT NULL;

-- The sweeper's index replaces the one on expires_at: next_deadline_at is never later
-- than expires_at, so "due" is always found through it.
DROP INDEX idx_execution_wait_states_expires_at;
CREATE INDEX idx_execution_wait_states_next_deadline ON execution_wait_states (next_deadline_at)
    WHERE status = 'waiting';

-- Every write to a wait state maintains each index that is not partial, so indexes
-- that serve no lookup go: by execution_id, UNIQUE (execution_id, node_id) serves (it
-- leads with the column); by both ids, the unique index on correlation_id finds the one
-- row and the execution id is checked on it.
DROP INDEX idx_execution_wait_states_execution_id;
DROP INDEX idx_execution_wait_states_exec_corr;

-- A cancelled execution leaves its unfinished nodes cancelled.
ALTER TABLE node_executions DROP CONSTRAINT node_executions_status_check;
ALTER TABLE node_executions ADD CONSTRAINT node_executions_status_check
    CHECK (status IN ('pending', 'running', 'waiting_for_events', 'completed', 'failed', 'skipped', 'cancelled'));

-- Retention finds finished executions by when they finished.
CREATE INDEX executions_finished_at_idx ON executions (finished_at) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP INDEX executions_finished_at_idx;
ALTER TABLE node_executions DROP CONSTRAINT node_executions_status_check;
ALTER TABLE node_executions ADD CONSTRAINT node_executions_status_check
    CHECK (status IN ('pending', 'running', 'waiting_for_events', 'completed', 'failed', 'skipped'));
CREATE INDEX idx_execution_wait_states_execution_id ON execution_wait_states (execution_id);
CREATE INDEX idx_execution_wait_states_exec_corr ON execution_wait_states (execution_id, correlation_id);
DROP INDEX idx_execution_wait_states_next_deadline;
CREATE INDEX idx_execution_wait_states_expires_at ON execution_wait_states (expires_at) WHERE status = 'waiting';
ALTER TABLE execution_wait_states DROP COLUMN timed_out_events, DROP COLUMN next_deadline_at;
