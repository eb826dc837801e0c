-- +goose Up

-- Which wait and event each signed callback's webhook-id was delivered to. A Standard
-- Webhooks signature covers the webhook-id, timestamp and body, not the id headers nor
-- the event's name (query or header): without this record a captured delivery could be
-- replayed, re-signed retries included, against another wait or as another event by
-- rewriting them. A binding never moves; the janitor deletes it with the unmatched
-- events, after the retention of finished executions, whose waits it named.
CREATE TABLE callback_webhook_ids (
    webhook_id     text        PRIMARY KEY,
    execution_id   uuid        NOT NULL,
    correlation_id uuid        NOT NULL,
    event_name     text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idx_callback_webhook_ids_created_at ON callback_webhook_ids (created_at);

-- +goose Down
DROP TABLE callback_webhook_ids;
