-- name: NodeExecutionInsertPending :exec
INSERT INTO node_executions (execution_id, node_id)
SELECT @execution_id::uuid, unnest(@node_ids::text[]);

-- name: NodeExecutionListByExecution :many
SELECT * FROM node_executions
WHERE execution_id = @execution_id::uuid
ORDER BY created_at, node_id;

-- name: NodeExecutionMarkRunning :exec
UPDATE node_executions
SET status = 'running',
    attempts = attempts + 1,
    started_at = coalesce(started_at, now()),
    updated_at = now()
WHERE execution_id = @execution_id::uuid AND node_id = @node_id::text
  AND status IN ('pending', 'running');

-- name: NodeExecutionFinish :exec
-- Records a node's terminal or waiting status. Only a node that is not already finished
-- moves, so a stale writer cannot overwrite an outcome.
UPDATE node_executions
SET status = @status::text,
    output = sqlc.narg(output)::jsonb,
    error = sqlc.narg(error)::text,
    updated_at = now(),
    finished_at = CASE WHEN @status::text IN ('completed', 'failed', 'skipped') THEN now() ELSE NULL END
WHERE execution_id = @execution_id::uuid AND node_id = @node_id::text
  AND status NOT IN ('completed', 'failed', 'skipped');
