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
