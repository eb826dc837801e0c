-- name: WebhookIDBind :many
-- Binds a webhook-id to the wait its callback named, or returns the wait it is bound
-- to already. A binding whose tolerance has passed is replaced: a message that old is
-- refused by its signature's timestamp, so such a row only waits for the janitor. No
-- row comes back when a concurrent binding of the same id committed after this
-- statement began; the caller then asks again.
WITH bound AS (
    INSERT INTO callback_webhook_ids (webhook_id, execution_id, correlation_id, expires_at)
    VALUES (@webhook_id::text, @execution_id::uuid, @correlation_id::uuid, @expires_at::timestamptz)
    ON CONFLICT (webhook_id) DO UPDATE
    SET execution_id = EXCLUDED.execution_id,
        correlation_id = EXCLUDED.correlation_id,
        expires_at = EXCLUDED.expires_at
    WHERE callback_webhook_ids.expires_at < now()
    RETURNING execution_id, correlation_id
)
SELECT b.execution_id, b.correlation_id FROM bound AS b
UNION ALL
SELECT w.execution_id, w.correlation_id FROM callback_webhook_ids AS w
WHERE w.webhook_id = @webhook_id::text AND NOT EXISTS (SELECT 1 FROM bound);

-- name: WebhookIDPrune :execrows
DELETE FROM callback_webhook_ids
WHERE webhook_id IN (
    SELECT webhook_id FROM callback_webhook_ids
    WHERE expires_at < @now::timestamptz
    ORDER BY expires_at
    LIMIT @max::integer
);
