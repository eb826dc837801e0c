-- name: ExecutionInsert :one
INSERT INTO executions (id, workflow_name, workflow_version, status, input)
VALUES (@id::uuid, @workflow_name::text, @workflow_version::integer, 'running', @input::jsonb)
RETURNING *;

-- name: ExecutionGet :one
SELECT * FROM executions WHERE id = @id::uuid;

-- name: ExecutionGetForUpdate :one
-- Every change to an execution's graph (advancing, failing, finishing) happens under this
-- row lock, so two branches finishing at once cannot both miss their common successor.
SELECT * FROM executions WHERE id = @id::uuid FOR UPDATE;

-- name: ExecutionSetStatus :exec
UPDATE executions
SET status = @status::text,
    error = sqlc.narg(error)::text,
    updated_at = now(),
    finished_at = CASE WHEN @status::text IN ('completed', 'failed', 'cancelled') THEN now() ELSE NULL END
WHERE id = @id::uuid;

-- name: ExecutionListForUpdate :many
-- Locks in id order, so that batches locking overlapping executions cannot deadlock.
SELECT * FROM executions WHERE id = ANY(@ids::uuid[]) ORDER BY id FOR UPDATE;

-- name: ExecutionSetStatusMany :exec
UPDATE executions AS e
SET status = c.status,
    updated_at = now(),
    finished_at = CASE WHEN c.status IN ('completed', 'failed', 'cancelled') THEN now() ELSE NULL END
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@statuses::text[]) AS status) AS c
WHERE e.id = c.id;
