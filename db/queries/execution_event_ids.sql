-- name: ExecutionEventIDInsert :execrows
-- 0 rows: this id was already sent to the execution, so the event is a duplicate.
INSERT INTO execution_event_ids (execution_id, event_id)
VALUES (@execution_id::uuid, @event_id::text)
ON CONFLICT DO NOTHING;
