package server_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/server/auth"
)

// TestOIDCThroughTheService: with an identity provider configured (discovery and JWKS
// on loopback), a replica takes its JWTs, roles from the configured claim, the subject
// as principal in the audit log; a JWT of another audience is refused.
func TestOIDCThroughTheService(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	var idp *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": idp.URL, "jwks_uri": idp.URL + "/keys",
			"authorization_endpoint": idp.URL + "/auth", "token_endpoint": idp.URL + "/token"})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "idp-1", Algorithm: "RS256", Use: "sig"}}})
	})
	idp = httptest.NewServer(mux)
	t.Cleanup(idp.Close)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "idp-1"}}, (&jose.SignerOptions{}).WithType("JWT"))
	require.NoError(t, err)
	jwtFor := func(sub, aud string, roles ...string) string {
		raw, err := jwt.Signed(signer).Claims(map[string]any{"iss": idp.URL, "aud": aud, "sub": sub,
			"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(), "rendezvous/roles": roles}).Serialize()
		require.NoError(t, err)
		return raw
	}

	s := runService(t, server.Config{DatabaseURL: dbtest.NewSchema(t).URL, InstanceID: "oidc", AutoMigrate: true,
		Auth: auth.Config{OIDC: auth.OIDCConfig{Issuer: idp.URL, Audience: "rendezvous", RoleClaim: "rendezvous/roles"}}})
	base := "http://" + s.Addr()

	ex := doAt(t, base, jwtFor("alice", "rendezvous", "admin"), "GET", "/api/v1/whoami", nil)
	require.Equal(t, http.StatusOK, ex.status, "%s", ex.body)
	require.Equal(t, map[string]any{"name": "alice", "kind": "oidc", "role": "admin"}, ex.json)

	def := map[string]any{"name": "orders", "nodes": []any{map[string]any{"id": "n", "type": "wait_events", "data": map[string]any{}}}}
	require.Equal(t, http.StatusForbidden, doAt(t, base, jwtFor("bob", "rendezvous", "operator"), "PUT", "/api/v1/workflows/orders", def).status)
	require.Equal(t, http.StatusCreated, doAt(t, base, jwtFor("alice", "rendezvous", "admin"), "PUT", "/api/v1/workflows/orders", def).status)
	require.Equal(t, http.StatusUnauthorized, doAt(t, base, jwtFor("alice", "another-client", "admin"), "GET", "/api/v1/whoami", nil).status)

	ex = doAt(t, base, jwtFor("alice", "rendezvous", "admin"), "GET", "/api/v1/audit", nil)
	require.Equal(t, http.StatusOK, ex.status)
	rows := ex.json["items"].([]any)
	require.Len(t, rows, 1)
	require.Equal(t, "oidc:alice", rows[0].(map[string]any)["principal"])
}
