-- +goose Up

-- Which replica registered each wait, for the gauge of open waits per replica. A wait is
-- decided by whichever replica an event reaches, so this names where it started, not who
-- owns it; waits registered before this column read as NULL.
ALTER TABLE execution_wait_states ADD COLUMN registered_by text;

-- Each running replica's heartbeat. A replica writes its row every heartbeat interval
-- and deletes it when it stops in order; a replica that died leaves its row behind,
-- growing older, and every live replica exports its age — so the alert on a silent
-- replica does not depend on the dead one reporting anything. Rows older than an hour
-- are pruned by the replicas' heartbeat rounds.
CREATE TABLE replica_heartbeats (
    instance_id text        PRIMARY KEY,
    started_at  timestamptz NOT NULL,
    beat_at     timestamptz NOT NULL
);

-- +goose Down
DROP TABLE replica_heartbeats;
ALTER TABLE execution_wait_states DROP COLUMN registered_by;
