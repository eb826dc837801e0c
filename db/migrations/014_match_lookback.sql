-- +goose Up

-- Kafka records correlated by payload match that reached no open wait, kept for the
-- lookback of the events that could match them: a wait registering later with one of
-- their match values takes one in the transaction that registers it (the sent-event
-- buffer's design, carried to payload matches). One row per match key of the record
-- that some event keeps; the key is the one execution_wait_states.match_keys holds.
--
-- A row stays after a wait took it (status taken) or after a newer record superseded
-- it (last_write_wins), until it expires: a redelivery of the record (at-least-once
-- intake) then finds its row and is not kept a second time. The janitor deletes
-- expired rows in small batches.
CREATE TABLE match_lookback (
    id          bigserial   PRIMARY KEY,
    match_key   text        NOT NULL,
    -- The record's identity as the aggregator keys events (sha256 of its value, or its
    -- id), so it is recorded with the key a live record would have.
    event_key   text        NOT NULL,
    payload     jsonb       NOT NULL,
    -- Where it came from: kind, topic, partition, offset.
    source      jsonb       NOT NULL,
    status      text        NOT NULL DEFAULT 'kept' CHECK (status IN ('kept', 'taken', 'superseded')),
    -- The wait that took the record, or whose taking of a newer one superseded it.
    taken_by    uuid,
    kept_at     timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

CREATE UNIQUE INDEX match_lookback_key_event_idx ON match_lookback (match_key, event_key);
-- A registering wait reads the kept records of its key, oldest or newest first.
CREATE INDEX match_lookback_kept_idx ON match_lookback (match_key, id) WHERE status = 'kept';
-- The janitor's pruning.
CREATE INDEX match_lookback_expires_at_idx ON match_lookback (expires_at);

-- +goose Down
DROP TABLE match_lookback;
