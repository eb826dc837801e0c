-- name: ReplicaHeartbeatBeat :exec
-- A replica's heartbeat: its row, written or moved forward.
INSERT INTO replica_heartbeats (instance_id, started_at, beat_at)
VALUES (@instance_id::text, @started_at::timestamptz, @now::timestamptz)
ON CONFLICT (instance_id) DO UPDATE SET beat_at = excluded.beat_at, started_at = excluded.started_at;

-- name: ReplicaHeartbeatDelete :exec
-- A replica stopping in order takes its row away: it is not silent, it is gone.
DELETE FROM replica_heartbeats WHERE instance_id = @instance_id::text;

-- name: ReplicaHeartbeatList :many
-- Every replica's last heartbeat, for the age gauge.
SELECT instance_id, beat_at FROM replica_heartbeats ORDER BY instance_id;

-- name: ReplicaHeartbeatPrune :execrows
-- Forgets replicas silent since before @before.
DELETE FROM replica_heartbeats WHERE beat_at < @before::timestamptz;
