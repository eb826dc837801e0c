-- name: AuditLogInsert :exec
INSERT INTO audit_log (principal, remote_addr, action, target, outcome, detail)
VALUES (@principal::text, @remote_addr::text, @action::text, @target::text, @outcome::text, @detail::text);

-- name: AuditLogList :many
-- Newest first, keyset on id.
SELECT * FROM audit_log
WHERE (sqlc.narg(principal)::text IS NULL OR principal = sqlc.narg(principal)::text)
  AND (sqlc.narg(action)::text IS NULL OR action = sqlc.narg(action)::text)
  AND (sqlc.narg(target)::text IS NULL OR target = sqlc.narg(target)::text)
  AND (sqlc.narg(since)::timestamptz IS NULL OR at >= sqlc.narg(since)::timestamptz)
  AND (sqlc.narg(before_id)::bigint IS NULL OR id < sqlc.narg(before_id)::bigint)
ORDER BY id DESC
LIMIT @max::integer;

-- name: AuditLogDeleteBefore :execrows
DELETE FROM audit_log
WHERE id IN (
    SELECT id FROM audit_log
    WHERE at < @cutoff::timestamptz
    ORDER BY id
    LIMIT @max::integer
    FOR UPDATE SKIP LOCKED
);

-- name: AuditLogInsertMany :exec
-- The rows of changes committed together (sent events decided in one transaction), one
-- per change, in the order given.
INSERT INTO audit_log (principal, remote_addr, action, target, outcome, detail)
SELECT unnest(@principals::text[]), unnest(@remote_addrs::text[]), unnest(@actions::text[]),
       unnest(@targets::text[]), unnest(@outcomes::text[]), unnest(@details::text[]);
