-- +goose Up

-- The operator's lists (GET /api/v1/wait-states, GET /api/v1/executions) page by keyset
-- on (created_at, id). Each index below lets a page start at its cursor and stop after
-- `limit` rows, in order, instead of sorting every row that matches; the id breaks ties
-- between rows created in the same transaction, so the order is total and stable.
--
-- Wait states: all of them oldest first, and the open ones (the usual question: what is
-- still waiting, longest first) through a partial index that holds only open waits, so
-- it stays small however many finished waits retention keeps, a wait leaves it when it
-- finishes, and no other statement can be planned through it for finished rows (an index
-- led by status was: a resume batch then read every finished wait). A list of finished
-- waits by status walks (created_at, id) and filters. By execution, UNIQUE
-- (execution_id, node_id) already finds the few rows. Neither index costs HOT updates:
-- created_at and id never change, and status already is an indexed column (the
-- sweeper's partial index).
CREATE INDEX execution_wait_states_created_at_id_idx ON execution_wait_states (created_at, id);
CREATE INDEX execution_wait_states_open_created_at_id_idx ON execution_wait_states (status, created_at, id)
    WHERE status IN ('waiting', 'scheduled');

-- Executions, newest first (read backwards): all, by status, by workflow. The status
-- index replaces (status, created_at), which it covers.
CREATE INDEX executions_created_at_id_idx ON executions (created_at, id);
DROP INDEX executions_status_created_at_idx;
CREATE INDEX executions_status_created_at_id_idx ON executions (status, created_at, id);
CREATE INDEX executions_workflow_created_at_id_idx ON executions (workflow_name, created_at, id);

-- +goose Down
DROP INDEX executions_workflow_created_at_id_idx;
DROP INDEX executions_status_created_at_id_idx;
CREATE INDEX executions_status_created_at_idx ON executions (status, created_at);
DROP INDEX executions_created_at_id_idx;
DROP INDEX execution_wait_states_open_created_at_id_idx;
DROP INDEX execution_wait_states_created_at_id_idx;
