-- +goose Up

-- One trace per wait: the span of the node that registered the wait is stored with it
-- (W3C traceparent), so the outbound call, every event, the deadline and the
-- continuation — on whichever replica they happen — join that trace.
ALTER TABLE execution_wait_states ADD COLUMN trace_parent text;

-- +goose Down
ALTER TABLE execution_wait_states DROP COLUMN trace_parent;
