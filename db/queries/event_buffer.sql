-- name: EventBufferInsert :one
INSERT INTO event_buffer (execution_id, event_type, event_id, payload, source, expires_at)
VALUES (@execution_id::uuid, @event_type::text, sqlc.narg(event_id)::text, @payload::jsonb, @source::jsonb,
        @expires_at::timestamptz)
RETURNING id;

-- name: EventBufferList :many
-- The unexpired events of one type buffered for an execution, oldest first. Callers hold
-- the execution's row lock, so no send to it races what they take; the rows are locked
-- too, because the janitor's expiry (EventBufferExpire, on any pod's clock) does not take
-- the execution's lock: it skips rows locked here, and rows it moved first are not seen.
SELECT * FROM event_buffer
WHERE execution_id = @execution_id::uuid AND event_type = @event_type::text AND expires_at > @now::timestamptz
ORDER BY id
FOR UPDATE;

-- name: EventBufferDelete :exec
-- A wait took these events.
DELETE FROM event_buffer WHERE id = ANY(@ids::bigint[]);

-- name: EventBufferSupersede :execrows
-- last_write_wins: the older events of a type that a wait took the newest of go to the
-- dead letters.
WITH moved AS (
    DELETE FROM event_buffer WHERE id = ANY(@ids::bigint[]) RETURNING *
)
INSERT INTO event_dead_letters (execution_id, event_type, event_id, payload, source, reason, buffered_at)
SELECT m.execution_id, m.event_type, m.event_id, m.payload, m.source, 'superseded', m.created_at
FROM moved AS m;

-- name: EventBufferExpire :many
-- Moves expired events to the dead letters, a small batch at a time; SKIP LOCKED lets
-- several pods sweep without waiting on each other.
WITH moved AS (
    DELETE FROM event_buffer
    WHERE id IN (
        SELECT b.id FROM event_buffer AS b
        WHERE b.expires_at <= @now::timestamptz
        ORDER BY b.expires_at
        LIMIT @max::integer
        FOR UPDATE SKIP LOCKED
    )
    RETURNING *
)
INSERT INTO event_dead_letters (execution_id, event_type, event_id, payload, source, reason, buffered_at)
SELECT m.execution_id, m.event_type, m.event_id, m.payload, m.source, 'expired', m.created_at
FROM moved AS m
RETURNING execution_id, event_type, event_id;
