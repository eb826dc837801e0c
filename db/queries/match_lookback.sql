-- name: MatchLookbackLock :exec
-- Serialises, until commit, a record that found no wait for @key with a wait registering
-- with it, so that one of the two always sees the other (see aggregator/lookback.go).
-- Per schema, like the other advisory locks.
SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':rendezvous-lookback:' || @key::text));

-- name: MatchLookbackKeep :many
-- Keeps records, one row per match key, until their expiry (the arrays are parallel),
-- and returns the records kept. A key under which a record is already kept (or was
-- taken) keeps its row: a redelivery is not a second record.
INSERT INTO match_lookback (match_key, event_key, payload, source, kept_at, expires_at)
SELECT unnest(@keys::text[]), unnest(@event_keys::text[]), unnest(@payloads::jsonb[]), unnest(@sources::jsonb[]),
       @kept_at::timestamptz, unnest(@expires_ats::timestamptz[])
ON CONFLICT (match_key, event_key) DO NOTHING
RETURNING event_key;

-- name: MatchLookbackList :many
-- The records kept under one key since @since, oldest first, locked: the janitor skips
-- them, and a registration of the same key holds the key's advisory lock anyway.
SELECT * FROM match_lookback
WHERE match_key = @key::text AND status = 'kept' AND kept_at >= @since::timestamptz AND expires_at > @now::timestamptz
ORDER BY id
FOR UPDATE;

-- name: MatchLookbackTake :execrows
-- A wait took these records. They stay, taken, until they expire (see the table).
UPDATE match_lookback SET status = 'taken', taken_by = @wait_state_id::uuid
WHERE id = ANY(@ids::bigint[]) AND status = 'kept';

-- name: MatchLookbackSupersede :execrows
-- last_write_wins: the older records of a key that a wait took the newest of go to the
-- dead letters (reason superseded, under the execution of that wait), as superseded
-- sent events do; their rows stay, superseded, until they expire.
WITH marked AS (
    UPDATE match_lookback SET status = 'superseded', taken_by = @wait_state_id::uuid
    WHERE id = ANY(@ids::bigint[]) AND status = 'kept'
    RETURNING payload, source, kept_at
)
INSERT INTO event_dead_letters (execution_id, event_type, payload, source, reason, buffered_at)
SELECT @execution_id::uuid, @event_type::text, m.payload, m.source, 'superseded', m.kept_at
FROM marked AS m;

-- name: MatchLookbackPrune :many
-- Deletes expired records, kept or taken, a small batch at a time, and returns the
-- status each had; SKIP LOCKED lets several pods prune without waiting on each other or
-- on a registration.
DELETE FROM match_lookback
WHERE id IN (
    SELECT id FROM match_lookback
    WHERE expires_at <= @now::timestamptz
    ORDER BY expires_at
    LIMIT @max::integer
    FOR UPDATE SKIP LOCKED
)
RETURNING status;
