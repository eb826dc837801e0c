-- +goose Up

-- One row per execution a Kafka trigger started, keyed by the trigger's dedupe key (a
-- value of the record, or its position topic/partition/offset): the row is inserted in
-- the transaction that inserts the execution, so a record delivered again — after a
-- crash before its offset was committed, a rebalance, or produced twice with the same
-- key — finds it and starts nothing. The key is per workflow: one record may start one
-- execution of each workflow whose trigger accepts it. The row goes with its execution
-- (retention); the foreign key is checked at commit, after the execution's insert.
CREATE TABLE execution_triggers (
    workflow_name  text        NOT NULL,
    dedupe_key     text        NOT NULL,
    execution_id   uuid        NOT NULL REFERENCES executions (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    topic          text        NOT NULL,
    kafka_partition integer    NOT NULL,
    kafka_offset   bigint      NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_name, dedupe_key)
);
CREATE INDEX execution_triggers_execution_id_idx ON execution_triggers (execution_id);

-- +goose Down
DROP TABLE execution_triggers;
