-- name: APITokenInsert :one
INSERT INTO api_tokens (id, name, role, workflow_prefix, token_sha256, expires_at)
VALUES (@id::uuid, @name::text, @role::text, sqlc.narg(workflow_prefix)::text, @token_sha256::bytea, sqlc.narg(expires_at)::timestamptz)
RETURNING *;

-- name: APITokenGetByHash :one
SELECT * FROM api_tokens WHERE token_sha256 = @token_sha256::bytea;

-- name: APITokenList :many
-- Oldest first, keyset on name (unique).
SELECT * FROM api_tokens
WHERE (sqlc.narg(after_name)::text IS NULL OR name > sqlc.narg(after_name)::text)
ORDER BY name
LIMIT @max::integer;

-- name: APITokenRevoke :one
-- Revokes a token by name; revoking a revoked token keeps its first revocation time.
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
WHERE name = @name::text
RETURNING *;
