-- +goose Up

-- Definitions are immutable once stored: a changed definition is a new version, so a
-- running execution always sees exactly the definition it started with.
CREATE TABLE workflows (
    name        text        NOT NULL,
    version     integer     NOT NULL CHECK (version > 0),
    definition  jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

CREATE TABLE executions (
    id               uuid        PRIMARY KEY,
    workflow_name    text        NOT NULL,
    workflow_version integer     NOT NULL,
    status           text        NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'waiting', 'completed', 'failed', 'cancelled')),
    input            jsonb       NOT NULL DEFAULT '{}',
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    FOREIGN KEY (workflow_name, workflow_version) REFERENCES workflows (name, version)
);

CREATE INDEX executions_status_created_at_idx ON executions (status, created_at);

CREATE TABLE node_executions (
    execution_id uuid        NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    node_id      text        NOT NULL,
    status       text        NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'waiting_for_events', 'completed', 'failed', 'skipped')),
    output       jsonb,
    error        text,
    attempts     integer     NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz,
    PRIMARY KEY (execution_id, node_id)
);

-- One row per wait_events node that is (or was) waiting. Every column, constraint and
-- index of the design note is here; expected_events generalises the note's two events
-- (api_response, kafka_event) into a list of named events so later sources add rows to
-- that list, not columns.
CREATE TABLE execution_wait_states (
    id                   uuid        PRIMARY KEY,
    execution_id         uuid        NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    node_id              text        NOT NULL,
    -- A random UUIDv4: a capability handed to the external service, unguessable.
    correlation_id       uuid        NOT NULL,
    aggregation_strategy text        NOT NULL
        CHECK (aggregation_strategy IN ('all', 'any', 'required_only', 'custom')),
    required_events      jsonb       NOT NULL DEFAULT '[]',
    enabled_events       jsonb       NOT NULL DEFAULT '[]',
    expected_events      jsonb       NOT NULL DEFAULT '[]',
    api_call_enabled     boolean     NOT NULL DEFAULT false,
    kafka_event_enabled  boolean     NOT NULL DEFAULT false,
    api_response_data    jsonb,
    kafka_event_data     jsonb,
    received_events      jsonb       NOT NULL DEFAULT '[]',
    on_timeout           text        NOT NULL DEFAULT 'fail'
        CHECK (on_timeout IN ('fail', 'continue', 'continue_with_partial')),
    output_mapping       jsonb       NOT NULL DEFAULT '{}',
    status               text        NOT NULL DEFAULT 'waiting'
        CHECK (status IN ('waiting', 'completed', 'timeout', 'failed', 'cancelled')),
    error                text,
    resumed_at           timestamptz,
    resumed_by           text,
    version              bigint      NOT NULL DEFAULT 1,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    expires_at           timestamptz NOT NULL,
    UNIQUE (execution_id, node_id)
);

-- Unique, unlike the design note: a correlation id names exactly one wait, and a
-- collision must fail loudly rather than route an event to two executions.
CREATE UNIQUE INDEX idx_execution_wait_states_correlation_id ON execution_wait_states (correlation_id);
CREATE INDEX idx_execution_wait_states_execution_id ON execution_wait_states (execution_id);
CREATE INDEX idx_execution_wait_states_status ON execution_wait_states (status) WHERE status = 'waiting';
CREATE INDEX idx_execution_wait_states_expires_at ON execution_wait_states (expires_at) WHERE status = 'waiting';
CREATE INDEX idx_execution_wait_states_exec_corr ON execution_wait_states (execution_id, correlation_id);

-- Durable work for the executor: run a node, or resume after a satisfied wait. A row is
-- claimable when visible_at has passed; claiming pushes visible_at forward by the lease,
-- so work held by a pod that died becomes claimable again on its own. attempt fences
-- the completion: only the holder of the latest claim may delete the row.
CREATE TABLE run_queue (
    id           bigserial   PRIMARY KEY,
    execution_id uuid        NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    node_id      text        NOT NULL,
    kind         text        NOT NULL CHECK (kind IN ('run', 'resume')),
    attempt      integer     NOT NULL DEFAULT 0,
    visible_at   timestamptz NOT NULL DEFAULT now(),
    claimed_by   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- A node runs (or resumes) at most once per execution: enqueueing twice is a no-op.
    UNIQUE (execution_id, node_id, kind)
);

CREATE INDEX run_queue_visible_at_idx ON run_queue (visible_at);

-- Outbound correlated API calls, committed with their wait state so that a reply can
-- never beat its row and a crash between commit and send loses nothing. The request is
-- rendered again when sent, so secrets from the environment never land in this table.
CREATE TABLE outbox (
    id            bigserial   PRIMARY KEY,
    wait_state_id uuid        NOT NULL REFERENCES execution_wait_states (id) ON DELETE CASCADE,
    execution_id  uuid        NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    node_id       text        NOT NULL,
    attempt       integer     NOT NULL DEFAULT 0,
    visible_at    timestamptz NOT NULL DEFAULT now(),
    claimed_by    text,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (wait_state_id)
);

CREATE INDEX outbox_visible_at_idx ON outbox (visible_at);

-- +goose Down
DROP TABLE outbox;
DROP TABLE run_queue;
DROP TABLE execution_wait_states;
DROP TABLE node_executions;
DROP TABLE executions;
DROP TABLE workflows;
