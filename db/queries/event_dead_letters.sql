-- name: EventDeadLetterList :many
-- Newest first, keyset on id.
SELECT * FROM event_dead_letters
WHERE (sqlc.narg(execution_id)::uuid IS NULL OR execution_id = sqlc.narg(execution_id)::uuid)
  AND (sqlc.narg(before_id)::bigint IS NULL OR id < sqlc.narg(before_id)::bigint)
ORDER BY id DESC
LIMIT @max::integer;

-- name: EventDeadLetterDeleteBefore :execrows
DELETE FROM event_dead_letters
WHERE id IN (
    SELECT id FROM event_dead_letters
    WHERE created_at < @cutoff::timestamptz
    ORDER BY created_at
    LIMIT @max::integer
);

-- name: EventDeadLetterGetForUpdate :one
-- A replay or a dismissal holds the row until it commits, so a dead letter is resolved
-- once however many operators act on it at the same time.
SELECT * FROM event_dead_letters WHERE id = @id::bigint FOR UPDATE;

-- name: EventDeadLetterResolve :exec
UPDATE event_dead_letters
SET resolution = @resolution::text, resolution_detail = @detail::text, resolved_at = now()
WHERE id = @id::bigint AND resolution IS NULL;

-- name: EventDeadLetterCountOpen :one
-- The unresolved dead letters a bulk dismissal would take: the dry run's count.
SELECT count(*)::bigint FROM event_dead_letters AS d
WHERE d.resolution IS NULL
  AND d.created_at <= @created_before::timestamptz
  AND (sqlc.narg(created_after)::timestamptz IS NULL OR d.created_at >= sqlc.narg(created_after)::timestamptz)
  AND (sqlc.narg(execution_id)::uuid IS NULL OR d.execution_id = sqlc.narg(execution_id)::uuid)
  AND (sqlc.narg(event_type)::text IS NULL OR d.event_type = sqlc.narg(event_type)::text)
  AND (sqlc.narg(reason)::text IS NULL OR d.reason = sqlc.narg(reason)::text)
  AND (sqlc.narg(workflow)::text IS NULL OR EXISTS (
      SELECT 1 FROM executions AS e WHERE e.id = d.execution_id AND e.workflow_name = sqlc.narg(workflow)::text));

-- name: EventDeadLetterDismissBatch :execrows
-- One batch of a bulk dismissal, oldest first: rows another transaction holds (a
-- replay) are skipped, so a batch never waits and locks at most @max rows.
UPDATE event_dead_letters
SET resolution = 'dismissed', resolution_detail = @detail::text, resolved_at = now()
WHERE id IN (
    SELECT d.id FROM event_dead_letters AS d
    WHERE d.resolution IS NULL
      AND d.created_at <= @created_before::timestamptz
      AND (sqlc.narg(created_after)::timestamptz IS NULL OR d.created_at >= sqlc.narg(created_after)::timestamptz)
      AND (sqlc.narg(execution_id)::uuid IS NULL OR d.execution_id = sqlc.narg(execution_id)::uuid)
      AND (sqlc.narg(event_type)::text IS NULL OR d.event_type = sqlc.narg(event_type)::text)
      AND (sqlc.narg(reason)::text IS NULL OR d.reason = sqlc.narg(reason)::text)
      AND (sqlc.narg(workflow)::text IS NULL OR EXISTS (
          SELECT 1 FROM executions AS e WHERE e.id = d.execution_id AND e.workflow_name = sqlc.narg(workflow)::text))
    ORDER BY d.id
    LIMIT @max::integer
    FOR UPDATE SKIP LOCKED
);
