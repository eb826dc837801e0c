-- +goose Up

-- Which wait each signed callback's webhook-id was delivered to, when its ids came in
-- headers. A Standard Webhooks signature covers the webhook-id, timestamp and body, not
-- the id headers: without this record a captured callback could be replayed, within the
-- timestamp tolerance, against another wait by rewriting them. A row is kept until the
-- tolerance has passed for it (expires_at); after that its signature is refused anyway.
CREATE TABLE callback_webhook_ids (
    webhook_id     text        PRIMARY KEY,
    execution_id   uuid        NOT NULL,
    correlation_id uuid        NOT NULL,
    expires_at     timestamptz NOT NULL
);
CREATE INDEX idx_callback_webhook_ids_expires_at ON callback_webhook_ids (expires_at);

-- +goose Down
DROP TABLE callback_webhook_ids;
