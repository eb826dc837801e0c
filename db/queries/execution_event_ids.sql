-- name: ExecutionEventIDExists :one
SELECT EXISTS (
    SELECT 1 FROM execution_event_ids WHERE execution_id = @execution_id::uuid AND event_id = @event_id::text
);

-- name: ExecutionEventIDDelete :exec
-- A dead-lettered event's id is forgotten when the event is replayed, so that the replay
-- is not taken for a duplicate of the send that was never applied.
DELETE FROM execution_event_ids WHERE execution_id = @execution_id::uuid AND event_id = @event_id::text;

-- name: ExecutionEventIDInsertMany :many
-- The pairs inserted are returned; a pair left out was already sent, so its event is a
-- duplicate. Callers pass each execution once.
INSERT INTO execution_event_ids (execution_id, event_id)
SELECT unnest(@execution_ids::uuid[]), unnest(@event_ids::text[])
ON CONFLICT DO NOTHING
RETURNING execution_id;
