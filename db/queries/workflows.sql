-- name: WorkflowGetLatest :one
SELECT * FROM workflows
WHERE name = @name::text
ORDER BY version DESC
LIMIT 1;

-- name: WorkflowGet :one
SELECT * FROM workflows
WHERE name = @name::text AND version = @version::integer;

-- name: WorkflowInsert :one
-- The version is computed in the statement; two concurrent inserts of one name collide
-- on the primary key and the loser retries, so versions never skip or repeat.
INSERT INTO workflows (name, version, definition)
SELECT @name::text, coalesce(max(version), 0) + 1, @definition::jsonb
FROM workflows
WHERE name = @name::text
RETURNING *;
