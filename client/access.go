package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// Token is an API token as listed: never its secret.
type Token struct {
	ID             string          `json:"id"`
	Name           string          `json:"name"`
	Role           string          `json:"role"`
	WorkflowPrefix string          `json:"workflow_prefix,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	ExpiresAt      *time.Time      `json:"expires_at,omitempty"`
	RevokedAt      *time.Time      `json:"revoked_at,omitempty"`
	Raw            json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (t *Token) UnmarshalJSON(b []byte) error {
	type plain Token
	return decodeKeepingRaw(b, (*plain)(t), &t.Raw)
}

// CreatedToken is a new token with its secret, which the server never shows again.
type CreatedToken struct {
	Token
	Secret string `json:"token"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (t *CreatedToken) UnmarshalJSON(b []byte) error {
	var secret struct {
		Secret string `json:"token"`
	}
	if err := json.Unmarshal(b, &secret); err != nil {
		return err
	}
	t.Secret = secret.Secret
	return t.Token.UnmarshalJSON(b)
}

// NewToken asks for a token.
type NewToken struct {
	Name           string     `json:"name"`
	Role           string     `json:"role"`
	WorkflowPrefix string     `json:"workflow_prefix,omitempty"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
}

// CreateToken creates an API token (admin only).
func (c *Client) CreateToken(ctx context.Context, req NewToken) (*CreatedToken, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var out CreatedToken
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/tokens", nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Tokens lists the API tokens by name.
func (c *Client) Tokens(ctx context.Context, p PageRequest) (*Page[Token], error) {
	return list[Token](ctx, c, "/api/v1/tokens", nil, p)
}

// RevokeToken revokes the token named name.
func (c *Client) RevokeToken(ctx context.Context, name string) (*Token, error) {
	var out Token
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/tokens/"+url.PathEscape(name)+"/revoke", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AuditRow is one row of the audit log.
type AuditRow struct {
	ID         int64           `json:"id"`
	At         time.Time       `json:"at"`
	Principal  string          `json:"principal"`
	RemoteAddr string          `json:"remote_addr"`
	Action     string          `json:"action"`
	Target     string          `json:"target"`
	Outcome    string          `json:"outcome"`
	Detail     string          `json:"detail,omitempty"`
	Raw        json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (r *AuditRow) UnmarshalJSON(b []byte) error {
	type plain AuditRow
	return decodeKeepingRaw(b, (*plain)(r), &r.Raw)
}

// AuditFilter selects audit rows; empty fields select all.
type AuditFilter struct {
	Principal, Action, Target string
	Since                     time.Time
}

// Audit lists the audit log, newest first (admin only).
func (c *Client) Audit(ctx context.Context, f AuditFilter, p PageRequest) (*Page[AuditRow], error) {
	q := url.Values{}
	setIf(q, "principal", f.Principal)
	setIf(q, "action", f.Action)
	setIf(q, "target", f.Target)
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339))
	}
	return list[AuditRow](ctx, c, "/api/v1/audit", q, p)
}
