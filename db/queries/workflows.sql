-- name: WorkflowGetLatest :one
SELECT * FROM workflows
WHERE name = @name::text
ORDER BY version DESC
LIMIT 1;

-- name: WorkflowGet :one
SELECT * FROM workflows
WHERE name = @name::text AND version = @version::integer;

-- name: WorkflowInsert :one
-- The version is computed in the statement; two concurrent inserts of one name collide
-- on the primary key and the loser retries, so versions never skip or repeat.
INSERT INTO workflows (name, version, definition)
SELECT @name::text, coalesce(max(version), 0) + 1, @definition::jsonb
FROM workflows
WHERE name = @name::text
RETURNING *;

-- name: WorkflowCount :one
-- How many definitions are stored. Definitions are never deleted, so the count changes
-- exactly when one is stored: the consumer compares it with the count it last read.
SELECT count(*) FROM workflows;

-- name: WorkflowKafkaEventConfigs :many
-- Every kafkaEvent block of every stored wait_events node (all versions: executions of
-- older versions may still wait). The consumer subscribes to their topics and reads ids
-- with their fields.
SELECT DISTINCT (n.node -> 'data' -> 'kafkaEvent')::jsonb AS kafka_event
FROM workflows AS w, jsonb_array_elements(w.definition -> 'nodes') AS n(node)
WHERE n.node ->> 'type' = 'wait_events' AND n.node -> 'data' ? 'kafkaEvent';

-- name: WorkflowKafkaNamedEvents :many
-- Every expected event with source kafka in the events list of every stored wait_events
-- node (all versions): the consumer subscribes to their topics, reads ids with the
-- default fields, and computes the payload-match keys of those with a match.
SELECT DISTINCT e.event::jsonb AS event
FROM workflows AS w,
     jsonb_array_elements(w.definition -> 'nodes') AS n(node),
     jsonb_array_elements(CASE WHEN jsonb_typeof(n.node -> 'data' -> 'events') = 'array'
                               THEN n.node -> 'data' -> 'events' ELSE '[]'::jsonb END) AS e(event)
WHERE n.node ->> 'type' = 'wait_events' AND e.event ->> 'source' = 'kafka';

-- name: WorkflowEventBufferTTL :one
-- The definition's eventBufferTtl (null when absent), for events buffered for one of its
-- executions.
SELECT (definition -> 'eventBufferTtl')::jsonb AS ttl
FROM workflows
WHERE name = @name::text AND version = @version::integer;

-- name: WorkflowTriggers :many
-- The triggers of the latest version of every workflow: a record starts an execution of
-- the latest version, so older versions' triggers no longer apply.
SELECT w.name, w.version, t.trigger::jsonb AS trigger
FROM (SELECT DISTINCT ON (name) name, version, definition FROM workflows ORDER BY name, version DESC) AS w,
     jsonb_array_elements(CASE WHEN jsonb_typeof(w.definition -> 'triggers') = 'array'
                               THEN w.definition -> 'triggers' ELSE '[]'::jsonb END) AS t(trigger);
