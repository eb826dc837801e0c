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

-- name: WorkflowKafkaEventConfigs :many
-- Every kafkaEvent block of every stored wait_events node (all versions: executions of
-- older versions may still wait). The consumer subscribes to their topics and reads ids
-- with their fields.
SELECT DISTINCT (n.node -> 'data' -> 'kafkaEvent')::jsonb AS kafka_event
FROM workflows AS w, jsonb_array_elements(w.definition -> 'nodes') AS n(node)
WHERE n.node ->> 'type' = 'wait_events' AND n.node -> 'data' ? 'kafkaEvent';
