package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// TokenPrefix starts every token this service makes, so that a secret scanner (or a
// person) recognises one in a log or a repository.
const TokenPrefix = "rdv_"

// Errors of the token store.
var (
	// ErrTokenNotFound: no token has this name.
	ErrTokenNotFound = errors.New("token not found")
	// ErrTokenExists: a token of this name exists (revoked ones too: names stay unique
	// so that the audit log names one token).
	ErrTokenExists = errors.New("a token of this name exists")
)

// TokenInvalidError is a token request that cannot be granted; Field names the field.
type TokenInvalidError struct{ Field, Reason string }

func (e *TokenInvalidError) Error() string { return e.Field + ": " + e.Reason }

// tokenName is what a token's name may be: it shows in the audit log and in URLs.
var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Token is a stored token as listed: never the token itself.
type Token struct {
	ID             string     `json:"id"`
	Name           string     `json:"name"`
	Role           Role       `json:"role"`
	WorkflowPrefix string     `json:"workflow_prefix,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	RevokedAt      *time.Time `json:"revoked_at,omitempty"`
}

// NewToken asks for a token.
type NewToken struct {
	Name string `json:"name"`
	Role Role   `json:"role"`
	// WorkflowPrefix is only for RoleSender.
	WorkflowPrefix string `json:"workflow_prefix,omitempty"`
	// ExpiresAt, when set, must be in the future.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// CreatedToken is a new token with its secret, which is never shown again.
type CreatedToken struct {
	Token
	Secret string `json:"token"`
}

// hashToken is what the database stores of a token.
func hashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// GenerateToken returns a new random token: TokenPrefix and 256 random bits.
func GenerateToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics instead)
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// Store keeps the API tokens in the database.
type Store struct {
	pool *pgxpool.Pool
	q    *dbsqlc.Queries
	now  func() time.Time
	// revoked runs after a revocation commits: this replica's Authenticator forgets
	// what it cached at once; the others within their cache's lifetime.
	revoked func()
}

// NewStore returns the token store of pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, q: dbsqlc.New(), now: time.Now}
}

func tokenOf(r dbsqlc.ApiToken) Token {
	t := Token{ID: r.ID.String(), Name: r.Name, Role: Role(r.Role), CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, RevokedAt: r.RevokedAt}
	if r.WorkflowPrefix != nil {
		t.WorkflowPrefix = *r.WorkflowPrefix
	}
	return t
}

// Create stores a new token and returns it with its secret. The audit row is written
// in the same transaction.
func (s *Store) Create(ctx context.Context, req NewToken) (CreatedToken, error) {
	if !tokenName.MatchString(req.Name) {
		return CreatedToken{}, &TokenInvalidError{"name", "1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"}
	}
	if _, err := ParseRole(string(req.Role)); err != nil {
		return CreatedToken{}, &TokenInvalidError{"role", err.Error()}
	}
	if req.WorkflowPrefix != "" && req.Role != RoleSender {
		return CreatedToken{}, &TokenInvalidError{"workflow_prefix", "only a sender token is limited to workflows"}
	}
	if req.ExpiresAt != nil && !req.ExpiresAt.After(s.now()) {
		return CreatedToken{}, &TokenInvalidError{"expires_at", "must be in the future"}
	}
	secret := GenerateToken()
	p := dbsqlc.APITokenInsertParams{ID: db.NewID(), Name: req.Name, Role: string(req.Role), TokenSha256: hashToken(secret), ExpiresAt: req.ExpiresAt}
	if req.WorkflowPrefix != "" {
		p.WorkflowPrefix = &req.WorkflowPrefix
	}
	var row dbsqlc.ApiToken
	err := db.Tx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if row, err = s.q.APITokenInsert(ctx, tx, p); err != nil {
			if errors.Is(db.Interpret(err), db.ErrDuplicate) {
				return ErrTokenExists
			}
			return fmt.Errorf("insert token: %w", err)
		}
		return audit.Record(ctx, tx, "token/"+req.Name, audit.OutcomeOK, "role "+string(req.Role))
	})
	if err != nil {
		return CreatedToken{}, err
	}
	return CreatedToken{Token: tokenOf(row), Secret: secret}, nil
}

// List returns up to limit tokens after the name after (the keyset cursor), by name,
// and whether there are more.
func (s *Store) List(ctx context.Context, after string, limit int) ([]Token, bool, error) {
	p := dbsqlc.APITokenListParams{Max: int32(limit) + 1}
	if after != "" {
		p.AfterName = &after
	}
	rows, err := s.q.APITokenList(ctx, s.pool, p)
	if err != nil {
		return nil, false, fmt.Errorf("list tokens: %w", err)
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	out := make([]Token, len(rows))
	for i, r := range rows {
		out[i] = tokenOf(r)
	}
	return out, more, nil
}

// Revoke revokes the token named name; revoking a revoked token changes nothing. Every
// replica refuses it once its cache of the token has expired (Config.CacheTTL).
func (s *Store) Revoke(ctx context.Context, name string) (Token, error) {
	var row dbsqlc.ApiToken
	err := db.Tx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if row, err = s.q.APITokenRevoke(ctx, tx, name); err != nil {
			if errors.Is(db.Interpret(err), db.ErrNotFound) {
				return ErrTokenNotFound
			}
			return fmt.Errorf("revoke token: %w", err)
		}
		return audit.Record(ctx, tx, "token/"+name, audit.OutcomeOK, "")
	})
	if err != nil {
		return Token{}, err
	}
	if s.revoked != nil {
		s.revoked()
	}
	return tokenOf(row), nil
}

// lookup returns the stored token whose hash is h, or ErrTokenNotFound.
func (s *Store) lookup(ctx context.Context, h []byte) (dbsqlc.ApiToken, error) {
	row, err := s.q.APITokenGetByHash(ctx, s.pool, h)
	if errors.Is(db.Interpret(err), db.ErrNotFound) {
		return row, ErrTokenNotFound
	}
	return row, err
}
