-- name: ExecutionTriggerClaim :one
-- Claims a dedupe key for the execution about to be inserted in the same transaction.
-- No row: the key started an execution already (a record seen again), and nothing
-- starts. A concurrent claim of the same key waits for the first one's transaction and
-- then finds it.
INSERT INTO execution_triggers (workflow_name, dedupe_key, execution_id, topic, kafka_partition, kafka_offset)
VALUES (@workflow_name::text, @dedupe_key::text, @execution_id::uuid, @topic::text, @kafka_partition::integer, @kafka_offset::bigint)
ON CONFLICT (workflow_name, dedupe_key) DO NOTHING
RETURNING execution_id;
