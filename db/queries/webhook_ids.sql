-- name: WebhookIDBind :one
-- Binds a webhook-id to the wait and event its delivery names, or returns the binding it
-- has. The no-op update makes the row come back, locked, in either case, also when a
-- concurrent first delivery of the same id committed it after this statement began.
INSERT INTO callback_webhook_ids AS c (webhook_id, execution_id, correlation_id, event_name)
VALUES (@webhook_id::text, @execution_id::uuid, @correlation_id::uuid, @event_name::text)
ON CONFLICT (webhook_id) DO UPDATE SET webhook_id = c.webhook_id
RETURNING c.execution_id, c.correlation_id, c.event_name;

-- name: WebhookIDPrune :execrows
DELETE FROM callback_webhook_ids
WHERE webhook_id IN (
    SELECT webhook_id FROM callback_webhook_ids
    WHERE created_at < @cutoff::timestamptz
    ORDER BY created_at
    LIMIT @max::integer
    FOR UPDATE SKIP LOCKED
);
