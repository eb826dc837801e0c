-- name: WaitStateInsert :one
INSERT INTO execution_wait_states (
    id, execution_id, node_id, correlation_id, aggregation_strategy,
    required_events, enabled_events, expected_events,
    api_call_enabled, kafka_event_enabled, on_timeout, output_mapping, expires_at, next_deadline_at,
    wait_type, timer, status, error, trace_parent, match_keys, registered_by
) VALUES (
    @id::uuid, @execution_id::uuid, @node_id::text, @correlation_id::uuid, @aggregation_strategy::text,
    @required_events::json, @enabled_events::json, @expected_events::json,
    @api_call_enabled::boolean, @kafka_event_enabled::boolean, @on_timeout::text, @output_mapping::json,
    @expires_at::timestamptz, @next_deadline_at::timestamptz,
    @wait_type::text, sqlc.narg(timer)::json, @status::text, sqlc.narg(error)::text,
    sqlc.narg(trace_parent)::text, coalesce(@match_keys::text[], '{}'), @registered_by::text
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

-- name: WaitStateRecordEvent :one
-- The optimistic fence: the update applies only to the version the caller read. Zero
-- rows means another writer got there first and the caller must reload and decide again.
UPDATE execution_wait_states
SET received_events = @received_events::json,
    timed_out_events = @timed_out_events::json,
    api_response_data = coalesce(sqlc.narg(api_response_data)::json, api_response_data),
    kafka_event_data = coalesce(sqlc.narg(kafka_event_data)::json, kafka_event_data),
    event_data = @event_data::json,
    status = @status::text,
    -- version counts applied changes: a write carrying several events adds them all.
    version = version + @applied::bigint,
    -- The moment of the change, not the transaction's start: a batch's transaction may
    -- have begun before its record was even produced.
    updated_at = clock_timestamp()
WHERE id = @id::uuid AND version = @version::bigint
RETURNING version;

-- name: WaitStateFinish :one
-- Moves an open wait (an event wait waiting, a timer scheduled) to a final status without
-- an event (outbound call failed, execution failed or cancelled), behind the same version
-- fence as events.
UPDATE execution_wait_states
SET status = @status::text,
    error = sqlc.narg(error)::text,
    version = version + 1,
    updated_at = now()
WHERE id = @id::uuid AND version = @version::bigint AND status IN ('waiting', 'scheduled')
RETURNING version;

-- name: WaitStateCancelOpenForExecution :many
-- Bumps the version, so an event decided against the open wait misses its fence, reads
-- the row again and finds it cancelled.
UPDATE execution_wait_states
SET status = 'cancelled',
    error = @error::text,
    version = version + 1,
    updated_at = clock_timestamp()
WHERE execution_id = @execution_id::uuid AND (status IN ('waiting', 'scheduled')) IS TRUE
RETURNING id;

-- name: WaitStateGetByID :one
SELECT * FROM execution_wait_states WHERE id = @id::uuid;

-- name: WaitStateListByCorrelationIDs :many
SELECT * FROM execution_wait_states
WHERE correlation_id = ANY(@correlation_ids::uuid[]);

-- name: WaitStateMarkResumedMany :many
-- resumed_at is set once: waits already resumed are absent from the result. updated_at
-- stays the moment the wait finished, so the result also tells how long it waited, and
-- its trace, for the continuation's span.
-- Each wait is found by its unique (execution_id, node_id); the status and resumed_at
-- test is wrapped in IS TRUE so that it can only filter those rows, never be answered
-- through an index on status instead: planned on statistics from before a burst of
-- completions, that index looked cheap and every batch read every finished wait.
UPDATE execution_wait_states AS w
SET resumed_at = clock_timestamp(),
    resumed_by = @instance_id::text
FROM (SELECT unnest(@execution_ids::uuid[]) AS execution_id, unnest(@node_ids::text[]) AS node_id) AS c
WHERE w.execution_id = c.execution_id AND w.node_id = c.node_id AND w.execution_id = ANY(@execution_ids::uuid[])
  AND (w.status IN ('completed', 'timeout', 'resumed') AND w.resumed_at IS NULL) IS TRUE
RETURNING w.execution_id, w.node_id, w.wait_type, w.aggregation_strategy, w.status, w.created_at, w.updated_at,
    w.trace_parent;

-- name: WaitStateClaimDue :many
-- Due waits, locked: SKIP LOCKED hands each to exactly one sweeper, and events decided
-- against a locked row wait for the sweeper's commit, then miss their version fence.
SELECT * FROM execution_wait_states
WHERE status IN ('waiting', 'scheduled') AND next_deadline_at <= @now::timestamptz
ORDER BY next_deadline_at
LIMIT @max::integer
FOR UPDATE SKIP LOCKED;

-- name: WaitStateNextDeadline :one
-- The earliest deadline of an open wait; no row when nothing is open.
SELECT next_deadline_at FROM execution_wait_states
WHERE status IN ('waiting', 'scheduled')
ORDER BY next_deadline_at
LIMIT 1;

-- name: WaitStateWrite :many
-- Writes a batch of decided waits in one statement — events recorded, deadlines passed,
-- a wait cancelled — and is the one place where a wait that ends gets its node's outcome
-- and its continuation. Each row is fenced by the version its decision was based on, and
-- by the wait being open; a row whose fence missed is absent from the result, and the
-- caller decides again. A null column keeps what the row holds.
-- A row with a node_status ends its wait: the node is finished (completed to continue,
-- failed to fail, with its output, error and warning) by this same statement, so only if
-- the fence held, in the wait's own row (node_executions reads it from there), and its
-- continuation is, by the row's continuation:
--   'queue'  a resume row for the executor's workers;
--   'here'   none: the wait is marked resumed by @instance_id in this same write, and
--            the caller continues the execution in this transaction (so it can be
--            resumed only once);
--   'caller' none, and not marked: the caller continues the execution at once in this
--            transaction (a wait cancelled to continue).
WITH input AS (
    -- Set-returning functions in one select list advance together: row k of each array.
    SELECT unnest(@ids::uuid[]) AS id,
           unnest(@versions::bigint[]) AS version,
           unnest(@bumps::bigint[]) AS bump,
           unnest(@statuses::text[]) AS status,
           unnest(@received_events::json[]) AS received_events,
           unnest(@timed_out_events::json[]) AS timed_out_events,
           unnest(@api_response_data::json[]) AS api_response_data,
           unnest(@kafka_event_data::json[]) AS kafka_event_data,
           unnest(@event_data::json[]) AS event_data,
           unnest(@next_deadlines::timestamptz[]) AS next_deadline_at,
           unnest(@errors::text[]) AS error,
           unnest(@node_statuses::text[]) AS node_status,
           unnest(@outputs::json[]) AS output,
           unnest(@node_errors::text[]) AS node_error,
           unnest(@warnings::text[]) AS warning,
           unnest(@continuations::text[]) AS continuation,
           -- The moment of the change (not the transaction's start: a batch's transaction
           -- may have begun before its record was even produced), once for every column.
           clock_timestamp() AS at
),
w AS (
    UPDATE execution_wait_states AS e
    SET status = i.status,
        received_events = coalesce(i.received_events, e.received_events),
        timed_out_events = coalesce(i.timed_out_events, e.timed_out_events),
        api_response_data = coalesce(i.api_response_data, e.api_response_data),
        kafka_event_data = coalesce(i.kafka_event_data, e.kafka_event_data),
        event_data = coalesce(i.event_data, e.event_data),
        next_deadline_at = i.next_deadline_at,
        error = coalesce(nullif(i.error, ''), e.error),
        -- version counts applied changes: a write carrying several events adds them all.
        version = e.version + i.bump,
        updated_at = i.at,
        resumed_at = CASE WHEN i.node_status <> '' AND i.continuation = 'here' THEN i.at ELSE e.resumed_at END,
        resumed_by = CASE WHEN i.node_status <> '' AND i.continuation = 'here' THEN @instance_id::text ELSE e.resumed_by END,
        node_status = nullif(i.node_status, ''),
        node_output = CASE WHEN i.node_status <> '' THEN i.output END,
        node_error = CASE WHEN i.node_status <> '' THEN nullif(i.node_error, '') END,
        node_warning = CASE WHEN i.node_status <> '' THEN nullif(i.warning, '') END,
        node_finished_at = CASE WHEN i.node_status <> '' THEN i.at END
    FROM input AS i
    -- The batch's rows are reached through the primary key (id = ANY), whatever the
    -- statistics say: the fence's status test only filters them (IS TRUE), so a plan made
    -- on a table never analyzed cannot read every open wait through an index on status.
    WHERE e.id = i.id AND e.id = ANY(@ids::uuid[]) AND e.version = i.version
      AND (e.status IN ('waiting', 'scheduled')) IS TRUE
    RETURNING e.id, e.execution_id, e.node_id, e.status, e.wait_type, e.aggregation_strategy, e.created_at, e.updated_at,
        e.trace_parent, i.node_status, i.continuation
),
r AS (
    INSERT INTO run_queue (execution_id, node_id, kind)
    SELECT w.execution_id, w.node_id, 'resume' FROM w WHERE w.node_status <> '' AND w.continuation = 'queue'
    ON CONFLICT (execution_id, node_id, kind) DO NOTHING
)
SELECT w.id, w.execution_id, w.node_id, w.status, w.wait_type, w.aggregation_strategy, w.created_at, w.updated_at,
    w.trace_parent, w.node_status::text AS node_status, w.continuation::text AS continuation
FROM w;

-- name: WaitStateCheckWritten :exec
-- Fails, and with it the transaction, unless every one of the waits holds what this
-- transaction's write gave it: the version and status written, in a row version this
-- transaction made (its xmin; a savepoint would give the write another one, and fail the
-- check). Sent right behind a WaitStateWrite whose continuation was made before the
-- write's answer came, so that a fence that missed cannot leave an execution continued
-- past a wait that was not written — whether another transaction changed the wait, or
-- this one did before the write (a continuation that failed the execution cancels its
-- open waits at once). The error is a cast of the count, which only a row that HAVING
-- lets through reaches.
WITH x AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@versions::bigint[]) AS version, unnest(@statuses::text[]) AS status
)
SELECT ('waits changed before their write: ' || count(*) || ' of ' || cardinality(@ids::uuid[]) || ' written')::int
FROM execution_wait_states AS e
JOIN x ON e.id = x.id
WHERE e.id = ANY(@ids::uuid[]) AND e.xmin = pg_current_xact_id()::xid
  AND e.version = x.version AND e.status = x.status
HAVING count(*) <> cardinality(@ids::uuid[]);

-- name: WaitStateGetByNodeForUpdate :one
SELECT * FROM execution_wait_states
WHERE execution_id = @execution_id::uuid AND node_id = @node_id::text
FOR UPDATE;

-- name: WaitStateDeleteFinishedBefore :execrows
-- Retention for waits of executions still running (a finished execution takes its waits
-- with it). A completed or timed-out wait goes only once its continuation ran; one that
-- holds its node's outcome hands it to the node's row as it goes (a trigger, whoever
-- deletes the wait).
DELETE FROM execution_wait_states
WHERE id IN (
    SELECT w.id
    FROM execution_wait_states AS w
    JOIN executions AS e ON e.id = w.execution_id
    WHERE e.finished_at IS NULL
      AND w.status NOT IN ('waiting', 'scheduled')
      AND (w.resumed_at IS NOT NULL OR w.status IN ('failed', 'cancelled', 'error'))
      AND w.updated_at < @cutoff::timestamptz
    LIMIT @max::integer
    FOR UPDATE OF w SKIP LOCKED
);

-- name: WaitStateCountOpen :many
-- Open waits by status and by the replica that registered them, for the metrics gauges,
-- and of those the stale ones: event waits open since before @stale_before with no event
-- recorded yet (registered_by is '' for waits from before it was recorded).
SELECT status, coalesce(registered_by, '')::text AS registered_by, count(*)::bigint AS count,
       (count(*) FILTER (WHERE wait_type = 'events' AND created_at < @stale_before::timestamptz
                          AND json_array_length(received_events) = 0))::bigint AS stale
FROM execution_wait_states
WHERE status IN ('waiting', 'scheduled')
GROUP BY status, registered_by;

-- name: WaitStateListOpenByExecutions :many
-- The waiting event waits of the executions of sent events decided together, found
-- through UNIQUE (execution_id, node_id). Oldest first: waiters receive in the order
-- they started waiting. The status test only filters (IS TRUE), as in WaitStateWrite.
SELECT * FROM execution_wait_states
WHERE execution_id = ANY(@execution_ids::uuid[]) AND (status = 'waiting') IS TRUE
ORDER BY execution_id, created_at, id;

-- name: WaitStateListByMatchKeys :many
-- The open waits holding any of a batch's payload-match keys, through the GIN index, one
-- key at a time: asked for many keys at once (&&), the planner estimates each from the
-- column's statistics — in which the type keys every such wait holds dominate — and
-- chooses to scan the table. The index's predicate is repeated word for word so the
-- planner can use it.
SELECT DISTINCT ON (w.id) w.*
FROM unnest(@keys::text[]) AS k(key)
CROSS JOIN LATERAL (
    SELECT * FROM execution_wait_states AS e
    WHERE e.match_keys @> ARRAY[k.key] AND e.status = 'waiting' AND e.match_keys <> '{}'
) AS w
ORDER BY w.id;

-- name: WaitStateCountMatchWaiters :one
-- Open waits holding one type key, counted up to @max (the admission limit): the count
-- stops there, so a full type costs a bounded read.
SELECT count(*)::bigint FROM (
    SELECT 1 FROM execution_wait_states
    WHERE match_keys @> ARRAY[@key::text] AND status = 'waiting' AND match_keys <> '{}'
    LIMIT @max::integer
) AS s;

-- name: WaitStateLockMatchType :exec
-- Serialises registrations of waiters of one match type until commit, so the admission
-- count cannot be passed by concurrent registrations. Per schema, like retention's lock.
SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':rendezvous-match:' || @key::text));

-- name: WaitStateReopen :one
-- A redrive opens a finished event wait again: waiting, with fresh deadlines, its
-- recorded events and payloads kept, nothing timed out, not resumed, and without the
-- node's outcome it held (left behind, it would show through once the wait ends again).
-- The version moves, so an event or a sweeper that decided against the finished row
-- misses its fence and decides again against the open one.
UPDATE execution_wait_states
SET status = 'waiting',
    error = NULL,
    node_status = NULL,
    node_output = NULL,
    node_error = NULL,
    node_warning = NULL,
    node_finished_at = NULL,
    expected_events = @expected_events::json,
    timed_out_events = '[]',
    expires_at = @expires_at::timestamptz,
    next_deadline_at = @next_deadline_at::timestamptz,
    resumed_at = NULL,
    resumed_by = NULL,
    version = version + 1,
    updated_at = clock_timestamp()
WHERE id = @id::uuid AND version = @version::bigint AND status IN ('timeout', 'failed', 'cancelled')
RETURNING *;

-- name: WaitStateDelete :exec
-- A redriven node that runs from scratch (a timer, a wait that could not be set up)
-- registers its wait again; the finished one makes way.
DELETE FROM execution_wait_states WHERE id = @id::uuid;

-- name: WaitStateHasEventKey :one
-- Whether a wait of the execution recorded an event under this idempotency key.
SELECT EXISTS (
    SELECT 1 FROM execution_wait_states AS w, json_array_elements(w.received_events) AS r
    WHERE w.execution_id = @execution_id::uuid AND r->>'key' = @key::text
);
