-- +goose Up

-- A node that finished but not as asked — a wait that timed out and went on with
-- partial data (onTimeout continue_with_partial) — says so here, next to its status:
-- a log line alone is gone by the time someone looks at the execution. Null for every
-- node finished before this column existed, and for every node without a warning.
ALTER TABLE node_executions ADD COLUMN warning text;

-- +goose Down
ALTER TABLE node_executions DROP COLUMN warning;
