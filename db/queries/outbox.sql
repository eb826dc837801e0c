-- name: OutboxInsert :exec
INSERT INTO outbox (wait_state_id, execution_id, node_id)
VALUES (@wait_state_id::uuid, @execution_id::uuid, @node_id::text)
ON CONFLICT (wait_state_id) DO NOTHING;

-- name: OutboxClaim :many
-- Leases and backoffs (visible_at) are set and judged on PostgreSQL's clock, not the
-- caller's: replicas whose clocks disagree would otherwise send a call another replica
-- holds, or before its backoff ran out.
UPDATE outbox
SET attempt = attempt + 1,
    claimed_by = @instance_id::text,
    visible_at = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8)
WHERE id IN (
    SELECT id FROM outbox
    WHERE visible_at <= now()
    ORDER BY visible_at, id
    LIMIT @max::integer
    FOR UPDATE SKIP LOCKED
)
RETURNING *;

-- name: OutboxDeleteClaimed :execrows
DELETE FROM outbox WHERE id = @id::bigint AND attempt = @attempt::integer;

-- name: OutboxRetryLater :execrows
UPDATE outbox
SET visible_at = now() + make_interval(secs => sqlc.arg(delay_seconds)::float8),
    last_error = @last_error::text
WHERE id = @id::bigint AND attempt = @attempt::integer;

-- name: OutboxDeleteForExecution :exec
DELETE FROM outbox WHERE execution_id = @execution_id::uuid;

-- name: OutboxDeleteForWaitState :exec
DELETE FROM outbox WHERE wait_state_id = @wait_state_id::uuid;

-- name: OutboxTarget :one
-- What a call's attempt needs of its wait: whether it still waits (a call of a wait that
-- ended, or was cancelled, before it left is no longer wanted), its correlation id and
-- the traceparent its span joins.
SELECT correlation_id, trace_parent, (status = 'waiting')::boolean AS waiting
FROM execution_wait_states
WHERE id = @id::uuid;

-- name: OutboxPostpone :execrows
-- A claimed call held back because its host's circuit is open: it becomes visible again
-- when the circuit may let a probe through, and gives back the attempt its claim counted,
-- since nothing was sent (or what was sent is the failure that opened the circuit).
UPDATE outbox
SET attempt = attempt - 1,
    visible_at = now() + make_interval(secs => sqlc.arg(delay_seconds)::float8),
    last_error = @last_error::text
WHERE id = @id::bigint AND attempt = @attempt::integer;
