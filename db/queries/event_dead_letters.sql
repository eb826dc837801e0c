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
