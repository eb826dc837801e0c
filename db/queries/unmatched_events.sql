-- name: UnmatchedEventInsertMany :exec
INSERT INTO unmatched_events (reason, source, event_name, event_type, execution_id, correlation_id, detail, payload_excerpt)
SELECT unnest(@reasons::text[]), unnest(@sources::jsonb[]), nullif(unnest(@event_names::text[]), ''),
       nullif(unnest(@event_types::text[]), ''), nullif(unnest(@execution_ids::uuid[]), '00000000-0000-0000-0000-000000000000'::uuid),
       nullif(unnest(@correlation_ids::uuid[]), '00000000-0000-0000-0000-000000000000'::uuid),
       unnest(@details::text[]), unnest(@payload_excerpts::text[]);

-- name: UnmatchedEventList :many
-- Newest first, keyset on id. The execution filter walks the primary key backwards
-- without an index of its own: retention bounds the table to its newest rows.
SELECT * FROM unmatched_events
WHERE (sqlc.narg(reason)::text IS NULL OR reason = sqlc.narg(reason)::text)
  AND (sqlc.narg(execution_id)::uuid IS NULL OR execution_id = sqlc.narg(execution_id)::uuid)
  AND (sqlc.narg(before_id)::bigint IS NULL OR id < sqlc.narg(before_id)::bigint)
ORDER BY id DESC
LIMIT @max::integer;

-- name: UnmatchedEventPrune :execrows
-- Keeps the newest @keep rows and nothing older than the cutoff, deleting a small batch
-- per call.
DELETE FROM unmatched_events
WHERE id IN (
    SELECT u.id FROM unmatched_events AS u
    WHERE u.created_at < @cutoff::timestamptz
       OR u.id <= coalesce((SELECT k.id FROM unmatched_events AS k ORDER BY k.id DESC OFFSET @keep::integer LIMIT 1), 0)
    ORDER BY u.id
    LIMIT @max::integer
);

-- name: UnmatchedEventGetForUpdate :one
-- As EventDeadLetterGetForUpdate: one resolution per row.
SELECT * FROM unmatched_events WHERE id = @id::bigint FOR UPDATE;

-- name: UnmatchedEventResolve :exec
UPDATE unmatched_events
SET resolution = @resolution::text, resolution_detail = @detail::text, resolved_at = now()
WHERE id = @id::bigint AND resolution IS NULL;
