-- +goose Up

-- API tokens. Only the SHA-256 of a token is kept: the token itself is shown once, when
-- it is created, and a copy of this table gives nobody a working credential. Tokens are
-- 256 random bits, so an unsalted hash is as strong as the token. Revocation and expiry
-- are columns rather than deletes so that the audit log keeps naming who a token was.
CREATE TABLE api_tokens (
    id              uuid        PRIMARY KEY,
    name            text        NOT NULL UNIQUE,
    role            text        NOT NULL CHECK (role IN ('admin', 'operator', 'viewer', 'sender')),
    -- Only for the sender role: the workflows whose executions it may send events to.
    workflow_prefix text        CHECK (workflow_prefix IS NULL OR role = 'sender'),
    token_sha256    bytea       NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz,
    revoked_at      timestamptz
);

-- One row per change made through the API, written in the transaction of the change (or,
-- for a refused or failed request, in one of its own), so a change is never without its
-- row. principal is a token name or an OIDC subject; target names what changed
-- ("workflow/orders", "execution/<id>", "token/ci").
CREATE TABLE audit_log (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    principal   text        NOT NULL,
    remote_addr text        NOT NULL,
    action      text        NOT NULL,
    target      text        NOT NULL,
    outcome     text        NOT NULL,
    detail      text        NOT NULL DEFAULT ''
);
CREATE INDEX idx_audit_log_at ON audit_log (at);

-- +goose Down
DROP TABLE audit_log;
DROP TABLE api_tokens;
