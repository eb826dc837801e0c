-- name: ExecutionInsert :one
-- restarted_from links a restart to the execution it restarts. status is running, or
-- waiting when every root node was run in the starting transaction and waits.
INSERT INTO executions (id, workflow_name, workflow_version, status, input, restarted_from)
VALUES (@id::uuid, @workflow_name::text, @workflow_version::integer, @status::text, @input::jsonb,
        sqlc.narg(restarted_from)::uuid)
RETURNING *;

-- name: ExecutionGet :one
SELECT * FROM executions WHERE id = @id::uuid;

-- name: ExecutionGetForUpdate :one
-- Every change to an execution's graph (advancing, failing, finishing, cancelling)
-- happens under this row lock, so two branches finishing at once cannot both miss their
-- common successor. NO KEY UPDATE: the key never changes, and the weaker lock does not
-- block the foreign-key checks (FOR KEY SHARE) of an event's transaction inserting the
-- continuation while it holds the wait row — which would deadlock with a cancel holding
-- this lock and waiting for that wait row.
SELECT * FROM executions WHERE id = @id::uuid FOR NO KEY UPDATE;

-- name: ExecutionSetStatus :exec
-- An execution that finishes takes its buffered events with it, into the dead letters
-- (reason execution_finished): no wait can take them any more, and none is dropped
-- silently.
WITH e AS (
    UPDATE executions
    SET status = @status::text,
        error = sqlc.narg(error)::text,
        updated_at = now(),
        finished_at = CASE WHEN @status::text IN ('completed', 'failed', 'cancelled') THEN now() ELSE NULL END
    WHERE id = @id::uuid
    RETURNING id, status
),
moved AS (
    DELETE FROM event_buffer AS b
    USING e
    WHERE b.execution_id = e.id AND b.execution_id = @id::uuid AND e.status IN ('completed', 'failed', 'cancelled')
    RETURNING b.*
)
INSERT INTO event_dead_letters (execution_id, event_type, event_id, payload, source, reason, buffered_at)
SELECT m.execution_id, m.event_type, m.event_id, m.payload, m.source, 'execution_finished', m.created_at
FROM moved AS m;

-- name: ExecutionListForUpdate :many
-- Locks in id order, so that batches locking overlapping executions cannot deadlock;
-- NO KEY UPDATE as ExecutionGetForUpdate.
SELECT * FROM executions WHERE id = ANY(@ids::uuid[]) ORDER BY id FOR NO KEY UPDATE;

-- name: ExecutionSetStatusMany :exec
-- As ExecutionSetStatus, for a batch: finishing executions dead-letter their buffers.
WITH e AS (
    UPDATE executions AS x
    SET status = c.status,
        updated_at = now(),
        finished_at = CASE WHEN c.status IN ('completed', 'failed', 'cancelled') THEN now() ELSE NULL END
    FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@statuses::text[]) AS status) AS c
    -- id = ANY reaches the rows through the primary key even on a table never analyzed,
    -- where the join alone was planned as a scan of every execution.
    WHERE x.id = c.id AND x.id = ANY(@ids::uuid[])
    RETURNING x.id, x.status
),
moved AS (
    DELETE FROM event_buffer AS b
    USING e
    WHERE b.execution_id = e.id AND e.status IN ('completed', 'failed', 'cancelled')
    RETURNING b.*
)
INSERT INTO event_dead_letters (execution_id, event_type, event_id, payload, source, reason, buffered_at)
SELECT m.execution_id, m.event_type, m.event_id, m.payload, m.source, 'execution_finished', m.created_at
FROM moved AS m;

-- name: ExecutionDeleteFinishedBefore :execrows
-- Retention: a small batch at a time, skipping rows someone holds, so no statement holds
-- many locks for long. Nodes, waits, queued work and calls go with their execution.
DELETE FROM executions
WHERE id IN (
    SELECT id FROM executions
    WHERE finished_at < @cutoff::timestamptz
    ORDER BY finished_at
    LIMIT @max::integer
    FOR UPDATE SKIP LOCKED
);

-- name: RetentionTryLock :one
-- One pod purges at a time. The key is per schema, so deployments (and tests) sharing a
-- database do not block each other.
SELECT pg_try_advisory_lock(hashtext(current_schema() || ':rendezvous-retention'));

-- name: RetentionUnlock :one
SELECT pg_advisory_unlock(hashtext(current_schema() || ':rendezvous-retention'));

-- name: ExecutionRedrive :one
-- A failed execution runs again: only a failed one moves, so of two redrives racing on
-- the row lock the second finds it running and changes nothing (no row).
UPDATE executions
SET status = 'running',
    error = NULL,
    finished_at = NULL,
    updated_at = now(),
    redrive_count = redrive_count + 1,
    redriven_at = now()
WHERE id = @id::uuid AND status = 'failed'
RETURNING *;

-- name: ExecutionSetRestartedAs :execrows
-- An execution is restarted once: of two restarts racing on its row lock, the second
-- finds the link set and changes nothing.
UPDATE executions
SET restarted_as = @restarted_as::uuid,
    updated_at = now()
WHERE id = @id::uuid AND restarted_as IS NULL;

-- name: ExecutionCountFailed :one
-- The failed executions a bulk redrive would take: the dry run's count.
SELECT count(*)::bigint FROM executions AS e
WHERE e.status = 'failed'
  AND e.finished_at <= @failed_before::timestamptz
  AND (sqlc.narg(failed_after)::timestamptz IS NULL OR e.finished_at >= sqlc.narg(failed_after)::timestamptz)
  AND (sqlc.narg(workflow)::text IS NULL OR e.workflow_name = sqlc.narg(workflow)::text)
  AND (sqlc.narg(error_contains)::text IS NULL OR strpos(lower(e.error), lower(sqlc.narg(error_contains)::text)) > 0)
  AND (sqlc.narg(node)::text IS NULL OR EXISTS (
      SELECT 1 FROM node_executions AS n
      WHERE n.execution_id = e.id AND n.node_id = sqlc.narg(node)::text AND n.status = 'failed'));

-- name: ExecutionClaimFailed :many
-- The next batch of a bulk redrive: failed executions matching the filter, in the
-- order they failed, after the cursor, locked until the batch commits. SKIP LOCKED:
-- a row someone else holds (an operator redriving it, another bulk run) is left to
-- them, so a batch never waits and never holds more than @max rows. failed_before is
-- fixed when a run starts, so an execution that fails again during the run is not
-- taken twice.
SELECT e.id, e.finished_at FROM executions AS e
WHERE e.status = 'failed'
  AND e.finished_at <= @failed_before::timestamptz
  AND (sqlc.narg(failed_after)::timestamptz IS NULL OR e.finished_at >= sqlc.narg(failed_after)::timestamptz)
  AND (sqlc.narg(workflow)::text IS NULL OR e.workflow_name = sqlc.narg(workflow)::text)
  AND (sqlc.narg(error_contains)::text IS NULL OR strpos(lower(e.error), lower(sqlc.narg(error_contains)::text)) > 0)
  AND (sqlc.narg(node)::text IS NULL OR EXISTS (
      SELECT 1 FROM node_executions AS n
      WHERE n.execution_id = e.id AND n.node_id = sqlc.narg(node)::text AND n.status = 'failed'))
  AND (e.finished_at, e.id) > (@after_finished_at::timestamptz, @after_id::uuid)
ORDER BY e.finished_at, e.id
LIMIT @max::integer
FOR NO KEY UPDATE SKIP LOCKED;
