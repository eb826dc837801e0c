-- name: RunQueueInsert :execrows
-- Idempotent: a node is enqueued at most once per kind for an execution.
INSERT INTO run_queue (execution_id, node_id, kind)
VALUES (@execution_id::uuid, @node_id::text, @kind::text)
ON CONFLICT (execution_id, node_id, kind) DO NOTHING;

-- name: RunQueueClaim :many
-- SKIP LOCKED lets every pod claim concurrently without waiting on each other; the lease
-- (visible_at pushed forward) hands work of a dead pod to another once it runs out.
-- Leases are set and judged on PostgreSQL's clock, not the caller's: replicas whose
-- clocks disagree would otherwise take each other's work before its lease ran out.
UPDATE run_queue
SET attempt = attempt + 1,
    claimed_by = @instance_id::text,
    visible_at = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8)
WHERE id IN (
    SELECT id FROM run_queue
    WHERE kind = @kind::text AND visible_at <= now()
    ORDER BY visible_at, id
    LIMIT @max::integer
    FOR UPDATE SKIP LOCKED
)
RETURNING *;

-- name: RunQueueDeleteClaimed :execrows
-- The fence: only the holder of the latest claim removes the row. Zero rows means the
-- lease was lost to another pod and the caller must roll back.
DELETE FROM run_queue WHERE id = @id::bigint AND attempt = @attempt::integer;

-- name: RunQueueRelease :exec
-- Hands claimed work back before its lease ends: after a delay when an attempt failed,
-- at once when a shutdown abandoned it.
UPDATE run_queue SET visible_at = now() + make_interval(secs => sqlc.arg(delay_seconds)::float8)
WHERE id = @id::bigint AND attempt = @attempt::integer;

-- name: RunQueueDeleteForExecution :exec
DELETE FROM run_queue WHERE execution_id = @execution_id::uuid;

-- name: Notify :exec
-- Delivered on commit, and only if the transaction commits: a wake-up never runs ahead
-- of the rows it announces.
SELECT pg_notify(@channel::text, '');

-- name: RunQueueInsertMany :exec
INSERT INTO run_queue (execution_id, node_id, kind)
SELECT unnest(@execution_ids::uuid[]), unnest(@node_ids::text[]), @kind::text
ON CONFLICT (execution_id, node_id, kind) DO NOTHING;

-- name: RunQueueDeleteClaimedMany :many
-- The fence of a batch: returns the rows this claim still owns; work whose lease was
-- lost to another pod is absent and must not be acted on.
DELETE FROM run_queue AS r
USING (SELECT unnest(@ids::bigint[]) AS id, unnest(@attempts::integer[]) AS attempt) AS c
WHERE r.id = c.id AND r.id = ANY(@ids::bigint[]) AND r.attempt = c.attempt
RETURNING r.id;

-- name: RunQueueDepth :many
-- Work by kind for the metrics gauge: queued and claimed rows alike, since a row is done
-- only when it is deleted. The (kind, visible_at) index answers it.
SELECT kind, count(*)::bigint AS count
FROM run_queue
GROUP BY kind;
