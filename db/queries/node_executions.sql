-- name: NodeExecutionInsert :exec
-- A new execution's nodes, each in the status its start left it: pending; running
-- (queued); or waiting_for_events with its output, run once in the starting transaction.
-- An empty output is none.
INSERT INTO node_execution_rows (execution_id, node_id, status, output, attempts, started_at)
SELECT @execution_id::uuid, n.node_id, n.status, NULLIF(n.output, '')::json,
       CASE WHEN n.status = 'waiting_for_events' THEN 1 ELSE 0 END,
       CASE WHEN n.status = 'waiting_for_events' THEN now() END
FROM (SELECT unnest(@node_ids::text[]) AS node_id, unnest(@statuses::text[]) AS status,
             unnest(@outputs::text[]) AS output) AS n;

-- name: NodeExecutionListByExecution :many
SELECT * FROM node_executions
WHERE execution_id = @execution_id::uuid
ORDER BY created_at, node_id;

-- name: NodeExecutionMarkRunning :exec
UPDATE node_execution_rows
SET status = 'running',
    attempts = attempts + 1,
    started_at = coalesce(started_at, now()),
    updated_at = now()
WHERE execution_id = @execution_id::uuid AND node_id = @node_id::text
  AND status IN ('pending', 'running');

-- name: NodeExecutionFinish :exec
-- Records a node's terminal or waiting status. Only a node that is not already finished
-- moves, so a stale writer cannot overwrite an outcome: not finished as stored (n: the
-- latest version, should another writer have moved it since this statement began) nor
-- as it reads (v: a waiting node whose wait decided it reads finished). The statements
-- here that move nodes test them as node_executions reads them, the one place that says
-- what a node is.
UPDATE node_execution_rows AS n
SET status = @status::text,
    output = sqlc.narg(output)::json,
    error = sqlc.narg(error)::text,
    updated_at = now(),
    finished_at = CASE WHEN @status::text IN ('completed', 'failed', 'skipped') THEN now() ELSE NULL END
FROM node_executions AS v
WHERE n.execution_id = @execution_id::uuid AND n.node_id = @node_id::text
  AND v.execution_id = n.execution_id AND v.node_id = n.node_id
  AND n.status NOT IN ('completed', 'failed', 'skipped', 'cancelled')
  AND v.status NOT IN ('completed', 'failed', 'skipped', 'cancelled');

-- name: NodeExecutionListByExecutions :many
SELECT * FROM node_executions WHERE execution_id = ANY(@execution_ids::uuid[]);

-- name: NodeExecutionStoredListByExecutions :many
-- The nodes of executions as stored: as node_executions reads them, except a node stored
-- as waiting whose wait has decided it, which reads its wait's outcome there. A reader
-- that knows those outcomes already, because its own write just decided the waits,
-- reads this instead and saves the view's look-up of every waiting node's wait.
SELECT execution_id, node_id, status, output, error, attempts, created_at, updated_at,
       started_at, finished_at, warning
FROM node_execution_rows WHERE execution_id = ANY(@execution_ids::uuid[]);

-- name: NodeExecutionSetStatusMany :exec
-- Moves nodes to running (queued) or skipped; finished nodes never move (as in
-- NodeExecutionFinish).
UPDATE node_execution_rows AS n
SET status = c.status,
    updated_at = now(),
    finished_at = CASE WHEN c.status = 'skipped' THEN now() ELSE NULL END
FROM (SELECT unnest(@execution_ids::uuid[]) AS execution_id, unnest(@node_ids::text[]) AS node_id,
             unnest(@statuses::text[]) AS status) AS c, node_executions AS v
WHERE n.execution_id = c.execution_id AND n.node_id = c.node_id AND n.execution_id = ANY(@execution_ids::uuid[])
  AND v.execution_id = n.execution_id AND v.node_id = n.node_id
  AND n.status NOT IN ('completed', 'failed', 'skipped', 'cancelled')
  AND v.status NOT IN ('completed', 'failed', 'skipped', 'cancelled');

-- name: NodeExecutionCancelOpen :exec
-- A cancelled execution's unfinished nodes are cancelled; finished ones keep their
-- outcome (as in NodeExecutionFinish).
UPDATE node_execution_rows AS n
SET status = 'cancelled',
    error = @error::text,
    updated_at = now(),
    finished_at = now()
FROM node_executions AS v
WHERE n.execution_id = @execution_id::uuid
  AND v.execution_id = n.execution_id AND v.node_id = n.node_id
  AND n.status IN ('pending', 'running', 'waiting_for_events')
  AND v.status IN ('pending', 'running', 'waiting_for_events');

-- name: NodeExecutionReopen :exec
-- A redrive hands the nodes that failed, or were cancelled when the execution failed,
-- back to the graph: pending, as if never reached, with their attempts kept as history.
-- As they read: a node stored as waiting whose wait failed it is one of them. (A
-- redrive holds the execution's row, as every change to its graph does: nothing else
-- finishes or reopens its nodes meanwhile.)
UPDATE node_execution_rows AS n
SET status = 'pending',
    output = NULL,
    error = NULL,
    updated_at = now(),
    finished_at = NULL
FROM node_executions AS v
WHERE n.execution_id = @execution_id::uuid
  AND v.execution_id = n.execution_id AND v.node_id = n.node_id
  AND v.status IN ('failed', 'cancelled');
