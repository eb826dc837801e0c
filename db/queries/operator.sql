-- Reads of the operator API (GET /api/v1/wait-states, /workflows, /executions). Lists
-- page by keyset, never OFFSET: a page starts strictly after (or, newest first, before)
-- the last row of the previous one, through an index on the order key, so each page
-- costs the same however deep it is. Filters are optional: a NULL argument leaves that
-- filter out. Run them after OperatorForceCustomPlans (see there).

-- name: OperatorForceCustomPlans :exec
-- An optional filter is written "@x IS NULL OR col = @x". A plan made for the arguments
-- at hand folds the unused filters away and picks the index of the used ones; a cached
-- generic plan, which PostgreSQL switches to after a few runs of a prepared statement,
-- serves every combination with one plan and so with one index. Transaction-local.
SELECT set_config('plan_cache_mode', 'force_custom_plan', true);

-- name: WaitStateList :many
-- Wait states with their execution's workflow and input (its summary's source), oldest
-- first. Only what the views show: never the event payloads, which may be large.
SELECT w.id, w.execution_id, e.workflow_name, e.workflow_version, e.input, w.node_id, w.correlation_id,
       w.wait_type, w.timer, w.aggregation_strategy, w.status, w.version,
       w.enabled_events, w.required_events, w.received_events, w.timed_out_events,
       w.error, w.resumed_at, w.resumed_by, w.expires_at, w.next_deadline_at, w.created_at, w.updated_at
FROM execution_wait_states AS w
JOIN executions AS e ON e.id = w.execution_id
WHERE (sqlc.narg(id)::uuid IS NULL OR w.id = sqlc.narg(id)::uuid)
  AND (sqlc.narg(execution_id)::uuid IS NULL OR w.execution_id = sqlc.narg(execution_id)::uuid)
  AND (sqlc.narg(status)::text IS NULL OR w.status = sqlc.narg(status)::text)
  AND (sqlc.narg(workflow)::text IS NULL OR e.workflow_name = sqlc.narg(workflow)::text)
  AND (sqlc.narg(node_id)::text IS NULL OR w.node_id = sqlc.narg(node_id)::text)
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (w.created_at, w.id) > (sqlc.narg(after_created_at)::timestamptz, sqlc.narg(after_id)::uuid))
ORDER BY w.created_at, w.id
LIMIT sqlc.narg(max)::integer;

-- name: ExecutionList :many
-- Executions newest first, with the input their summary is drawn from. A correlation id
-- names exactly one wait (its index is unique), so that filter is one index probe; the
-- time window bounds created_at, the order key, so it narrows the same index walk.
SELECT id, workflow_name, workflow_version, status, error, created_at, updated_at, finished_at, input
FROM executions
WHERE (sqlc.narg(status)::text IS NULL OR status = sqlc.narg(status)::text)
  AND (sqlc.narg(workflow)::text IS NULL OR workflow_name = sqlc.narg(workflow)::text)
  AND (sqlc.narg(correlation_id)::uuid IS NULL
       OR id = (SELECT c.execution_id FROM execution_wait_states AS c WHERE c.correlation_id = sqlc.narg(correlation_id)::uuid))
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR created_at < sqlc.narg(created_to)::timestamptz)
  AND (sqlc.narg(before_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(before_created_at)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY created_at DESC, id DESC
LIMIT @max::integer;

-- name: WorkflowList :many
-- One row per name, in name order, grouped while walking the primary key.
SELECT name,
       max(version)::integer AS latest_version,
       count(*)::integer AS versions,
       (array_agg(created_at ORDER BY version))[1]::timestamptz AS first_created_at,
       (array_agg(created_at ORDER BY version DESC))[1]::timestamptz AS latest_created_at
FROM workflows
WHERE sqlc.narg(after_name)::text IS NULL OR name > sqlc.narg(after_name)::text
GROUP BY name
ORDER BY name
LIMIT @max::integer;

-- name: WorkflowVersions :many
-- The versions of a name, newest first, without their definitions.
SELECT version, created_at FROM workflows
WHERE name = @name::text
ORDER BY version DESC;
