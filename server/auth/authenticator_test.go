package auth

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// clock is a test clock the authenticator reads.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestAuthenticator(t *testing.T, cfg Config) (*Authenticator, *clock) {
	t.Helper()
	a, err := New(context.Background(), dbtest.NewPool(t), cfg)
	require.NoError(t, err)
	c := &clock{t: time.Now()}
	a.now, a.store.now = c.now, c.now
	return a, c
}

func reasonOf(t *testing.T, err error) string {
	t.Helper()
	ae, ok := err.(*authError)
	require.True(t, ok, "%v", err)
	return ae.reason
}

// TestTokenCache: a replica trusts what it read of a token for CacheTTL, and not a
// moment longer: a revocation made elsewhere (here, straight in the store) is seen
// once the entry is CacheTTL old.
func TestTokenCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, c := newTestAuthenticator(t, Config{CacheTTL: 2 * time.Second})
	created, err := a.store.Create(ctx, NewToken{Name: "ci", Role: RoleOperator})
	require.NoError(t, err)

	p, err := a.Authenticate(ctx, "Bearer "+created.Secret)
	require.NoError(t, err)
	require.Equal(t, Principal{Name: "ci", Kind: KindToken, Role: RoleOperator}, *p)

	// Revoked through another replica's store: this one learns it from the database.
	_, err = NewStore(a.store.pool).Revoke(ctx, "ci")
	require.NoError(t, err)
	c.t = c.t.Add(2*time.Second - time.Millisecond)
	_, err = a.Authenticate(ctx, "Bearer "+created.Secret)
	require.NoError(t, err, "still trusted within the cache's lifetime")
	c.t = c.t.Add(time.Millisecond)
	_, err = a.Authenticate(ctx, "Bearer "+created.Secret)
	require.Equal(t, ReasonRevoked, reasonOf(t, err))
}

// TestRevokeThroughThisReplica: a revocation made through this replica's store holds
// here at once, cache or not.
func TestRevokeThroughThisReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, _ := newTestAuthenticator(t, Config{CacheTTL: 10 * time.Second})
	created, err := a.store.Create(ctx, NewToken{Name: "ci", Role: RoleOperator})
	require.NoError(t, err)
	_, err = a.Authenticate(ctx, "Bearer "+created.Secret)
	require.NoError(t, err)
	_, err = a.store.Revoke(ctx, "ci")
	require.NoError(t, err)
	_, err = a.Authenticate(ctx, "Bearer "+created.Secret)
	require.Equal(t, ReasonRevoked, reasonOf(t, err))
}

// TestTokenExpiry: expiry is checked against the clock at every use, not when cached.
func TestTokenExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, c := newTestAuthenticator(t, Config{})
	at := c.t.Add(time.Hour)
	created, err := a.store.Create(ctx, NewToken{Name: "short", Role: RoleViewer, ExpiresAt: &at})
	require.NoError(t, err)
	_, err = a.Authenticate(ctx, "Bearer "+created.Secret)
	require.NoError(t, err)
	c.t = at
	_, err = a.Authenticate(ctx, "Bearer "+created.Secret)
	require.Equal(t, ReasonExpired, reasonOf(t, err))
}

func TestAuthenticateRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, _ := newTestAuthenticator(t, Config{BootstrapToken: "bootstrap-bootstrap-bootstrap-0123"})
	for header, reason := range map[string]string{
		"":                          ReasonMissing,
		"Basic eDp5":                ReasonMalformed,
		"Bearer " + GenerateToken(): ReasonUnknown,
		"Bearer bootstrap-bootstrap-bootstrap-012": ReasonUnknown,
	} {
		_, err := a.Authenticate(ctx, header)
		require.Equal(t, reason, reasonOf(t, err), "%q", header)
	}
	p, err := a.Authenticate(ctx, "Bearer bootstrap-bootstrap-bootstrap-0123")
	require.NoError(t, err)
	require.Equal(t, RoleAdmin, p.Role)
	require.Equal(t, "bootstrap:bootstrap", p.AuditName())
}

func TestTokenStoreRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, c := newTestAuthenticator(t, Config{})
	past := c.t.Add(-time.Second)
	for req, field := range map[*NewToken]string{
		{Name: "", Role: RoleAdmin}:                                 "name",
		{Name: "has space", Role: RoleAdmin}:                        "name",
		{Name: "x", Role: "root"}:                                   "role",
		{Name: "x", Role: RoleOperator, WorkflowPrefix: "billing-"}: "workflow_prefix",
		{Name: "x", Role: RoleViewer, ExpiresAt: &past}:             "expires_at",
	} {
		_, err := a.store.Create(ctx, *req)
		var ie *TokenInvalidError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, field, ie.Field)
	}
	_, err := a.store.Create(ctx, NewToken{Name: "x", Role: RoleViewer})
	require.NoError(t, err)
	_, err = a.store.Create(ctx, NewToken{Name: "x", Role: RoleViewer})
	require.ErrorIs(t, err, ErrTokenExists)
	_, err = a.store.Revoke(ctx, "nope")
	require.ErrorIs(t, err, ErrTokenNotFound)
}

func TestRoleAllows(t *testing.T) {
	t.Parallel()
	want := map[Role][]Access{
		RoleAdmin:    {Any, Read, Send, Operate, Admin},
		RoleOperator: {Any, Read, Send, Operate},
		RoleViewer:   {Any, Read},
		RoleSender:   {Any, Send},
	}
	for role, allowed := range want {
		for _, a := range []Access{Any, Read, Send, Operate, Admin} {
			require.Equal(t, containsAccess(allowed, a), role.Allows(a), "%s %s", role, a)
		}
	}
	require.False(t, Role("root").Allows(Read))
}

func containsAccess(list []Access, a Access) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}
