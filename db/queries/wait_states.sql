-- name: WaitStateInsert :one
INSERT INTO execution_wait_states (
    id, execution_id, node_id, correlation_id, aggregation_strategy,
    required_events, enabled_events, expected_events,
    api_call_enabled, kafka_event_enabled, on_timeout, output_mapping, expires_at
) VALUES (
    @id::uuid, @execution_id::uuid, @node_id::text, @correlation_id::uuid, @aggregation_strategy::text,
    @required_events::jsonb, @enabled_events::jsonb, @expected_events::jsonb,
    @api_call_enabled::boolean, @kafka_event_enabled::boolean, @on_timeout::text, @output_mapping::jsonb,
    @expires_at::timestamptz
)
RETURNING *;

-- name: WaitStateGetByIDs :one
-- Correlation is by both ids at once, through the (execution_id, correlation_id) index.
SELECT * FROM execution_wait_states
WHERE execution_id = @execution_id::uuid AND correlation_id = @correlation_id::uuid;

-- name: WaitStateGetByCorrelationID :one
SELECT * FROM execution_wait_states
WHERE correlation_id = @correlation_id::uuid;

-- name: WaitStateExistsForExecution :one
SELECT EXISTS (SELECT 1 FROM execution_wait_states WHERE execution_id = @execution_id::uuid);

-- name: WaitStateGetByNode :one
SELECT * FROM execution_wait_states
WHERE execution_id = @execution_id::uuid AND node_id = @node_id::text;

-- name: WaitStateListByExecution :many
SELECT * FROM execution_wait_states
WHERE execution_id = @execution_id::uuid
ORDER BY created_at, node_id;

-- name: WaitStateRecordEvent :one
-- The optimistic fence: the update applies only to the version the caller read. Zero
-- rows means another writer got there first and the caller must reload and decide again.
UPDATE execution_wait_states
SET received_events = @received_events::jsonb,
    api_response_data = coalesce(sqlc.narg(api_response_data)::jsonb, api_response_data),
    kafka_event_data = coalesce(sqlc.narg(kafka_event_data)::jsonb, kafka_event_data),
    status = @status::text,
    version = version + 1,
    updated_at = now()
WHERE id = @id::uuid AND version = @version::bigint
RETURNING version;

-- name: WaitStateFinish :one
-- Moves a waiting state to a final status without an event (outbound call failed,
-- execution failed or cancelled), behind the same version fence as events.
UPDATE execution_wait_states
SET status = @status::text,
    error = sqlc.narg(error)::text,
    version = version + 1,
    updated_at = now()
WHERE id = @id::uuid AND version = @version::bigint AND status = 'waiting'
RETURNING version;

-- name: WaitStateCancelOpenForExecution :many
UPDATE execution_wait_states
SET status = 'cancelled',
    error = @error::text,
    version = version + 1,
    updated_at = now()
WHERE execution_id = @execution_id::uuid AND status = 'waiting'
RETURNING id;

-- name: WaitStateMarkResumed :execrows
-- resumed_at is set once: a second resume of the same wait changes nothing.
UPDATE execution_wait_states
SET resumed_at = clock_timestamp(),
    resumed_by = @instance_id::text,
    updated_at = now()
WHERE execution_id = @execution_id::uuid AND node_id = @node_id::text
  AND status = 'completed' AND resumed_at IS NULL;

-- name: WaitStateGetByID :one
SELECT * FROM execution_wait_states WHERE id = @id::uuid;
