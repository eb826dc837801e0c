-- +goose Up

-- Named events of any source (callback, kafka, send). The design note's two payload
-- columns stay for its two events; every other event's payload lives under its name in
-- event_data.
ALTER TABLE execution_wait_states
    ADD COLUMN event_data jsonb NOT NULL DEFAULT '{}',
    -- The payload-match keys of the wait's expected events, resolved at registration:
    -- 'v' || topic, type, left path and the canonical JSON of the right value, and
    -- 't' || topic, type (the admission count). Never updated after the insert.
    ADD COLUMN match_keys text[] NOT NULL DEFAULT '{}';

-- An incoming record is matched by looking its keys up here: only open waits with match
-- keys are in the index, a wait leaves it when it stops waiting (its new row version is
-- not indexed), and the cost of a lookup depends on how many waits hold the key, not on
-- how many wait. fastupdate is off so that no pending list is scanned on every lookup.
CREATE INDEX execution_wait_states_match_keys_idx ON execution_wait_states USING gin (match_keys)
    WITH (fastupdate = off)
    WHERE status = 'waiting' AND match_keys <> '{}';

-- Events sent by type to an execution that no node is waiting for yet (seed 001): held
-- until a wait_events node of that execution reaches a wait for the type, until they
-- expire, or until the execution finishes. Both end in event_dead_letters.
CREATE TABLE event_buffer (
    id            bigserial   PRIMARY KEY,
    execution_id  uuid        NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    event_type    text        NOT NULL,
    event_id      text,
    payload       jsonb       NOT NULL,
    source        jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL
);

-- A wait takes the oldest (fifo) or newest (last_write_wins) event of its type.
CREATE INDEX event_buffer_execution_type_idx ON event_buffer (execution_id, event_type, id);
-- The expiry sweep.
CREATE INDEX event_buffer_expires_at_idx ON event_buffer (expires_at);

-- Ids of events sent to an execution: the same id twice is applied once. They go with
-- the execution.
CREATE TABLE execution_event_ids (
    execution_id uuid        NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    event_id     text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (execution_id, event_id)
);

-- Buffered events that no wait took, with why (expired, superseded by a newer one under
-- last_write_wins, or their execution finished): nothing is dropped silently. No
-- foreign key: the record outlives its execution, for operators. Retention purges it.
CREATE TABLE event_dead_letters (
    id            bigserial   PRIMARY KEY,
    execution_id  uuid        NOT NULL,
    event_type    text        NOT NULL,
    event_id      text,
    payload       jsonb       NOT NULL,
    source        jsonb       NOT NULL,
    reason        text        NOT NULL CHECK (reason IN ('expired', 'superseded', 'execution_finished')),
    buffered_at   timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX event_dead_letters_created_at_idx ON event_dead_letters (created_at);

-- Recent events that matched nothing, and why (GET /api/v1/events/unmatched). Bounded:
-- retention keeps the newest rows only. The payload is kept as an excerpt.
CREATE TABLE unmatched_events (
    id              bigserial   PRIMARY KEY,
    reason          text        NOT NULL,
    source          jsonb       NOT NULL,
    event_name      text,
    event_type      text,
    execution_id    uuid,
    correlation_id  uuid,
    detail          text        NOT NULL DEFAULT '',
    payload_excerpt text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE unmatched_events;
DROP TABLE event_dead_letters;
DROP TABLE execution_event_ids;
DROP TABLE event_buffer;
DROP INDEX execution_wait_states_match_keys_idx;
ALTER TABLE execution_wait_states DROP COLUMN match_keys, DROP COLUMN event_data;
