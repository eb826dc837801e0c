package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// issuer is an OIDC identity provider on loopback: a discovery document and a JWKS with
// one RSA key, and a signer for tokens with any claims.
type issuer struct {
	srv *httptest.Server
	key *rsa.PrivateKey
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	iss := &issuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": iss.srv.URL, "jwks_uri": iss.srv.URL + "/jwks",
			"authorization_endpoint": iss.srv.URL + "/auth", "token_endpoint": iss.srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	iss.srv = httptest.NewServer(mux)
	t.Cleanup(iss.srv.Close)
	return iss
}

// sign returns a JWT of claims signed with key under kid.
func (iss *issuer) sign(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	require.NoError(t, err)
	raw, err := jwt.Signed(signer).Claims(claims).Serialize()
	require.NoError(t, err)
	return raw
}

func (iss *issuer) claims(mutate func(map[string]any)) map[string]any {
	now := time.Now()
	c := map[string]any{"iss": iss.srv.URL, "aud": "rendezvous", "sub": "alice@example.com",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "groups": []string{"staff", "operator"}}
	if mutate != nil {
		mutate(c)
	}
	return c
}

func TestOIDC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	iss := newIssuer(t)
	a, err := New(ctx, dbtest.NewPool(t), Config{OIDC: OIDCConfig{Issuer: iss.srv.URL, Audience: "rendezvous", RoleClaim: "groups"}})
	require.NoError(t, err)

	p, err := a.Authenticate(ctx, "Bearer "+iss.sign(t, iss.key, "k1", iss.claims(nil)))
	require.NoError(t, err)
	require.Equal(t, Principal{Name: "alice@example.com", Kind: KindOIDC, Role: RoleOperator}, *p)
	p, err = a.Authenticate(ctx, "Bearer "+iss.sign(t, iss.key, "k1", iss.claims(func(c map[string]any) { c["groups"] = "admin" })))
	require.NoError(t, err)
	require.Equal(t, RoleAdmin, p.Role, "a single string names one role")

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	enc := base64.RawURLEncoding.EncodeToString
	body, err := json.Marshal(iss.claims(nil))
	require.NoError(t, err)
	for name, token := range map[string]string{
		"expired":         iss.sign(t, iss.key, "k1", iss.claims(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() })),
		"wrong audience":  iss.sign(t, iss.key, "k1", iss.claims(func(c map[string]any) { c["aud"] = "someone-else" })),
		"wrong issuer":    iss.sign(t, iss.key, "k1", iss.claims(func(c map[string]any) { c["iss"] = "https://evil.example" })),
		"unknown key id":  iss.sign(t, other, "k2", iss.claims(nil)),
		"forged with kid": iss.sign(t, other, "k1", iss.claims(nil)),
		"alg none":        enc([]byte(`{"alg":"none","typ":"JWT","kid":"k1"}`)) + "." + enc(body) + ".",
		"no role":         iss.sign(t, iss.key, "k1", iss.claims(func(c map[string]any) { c["groups"] = []string{"staff"} })),
		"garbage":         "aaa.bbb.ccc",
	} {
		_, err := a.Authenticate(ctx, "Bearer "+token)
		require.Error(t, err, name)
		require.Equal(t, ReasonUnknown, reasonOf(t, err), name)
	}
}

func TestOIDCConfig(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, Config{OIDC: OIDCConfig{Issuer: "https://idp.example"}}.Validate(), "auth.oidc.audience")
	require.ErrorContains(t, Config{OIDC: OIDCConfig{Issuer: "idp.example", Audience: "x"}}.Validate(), "auth.oidc.issuer")
	require.ErrorContains(t, Config{OIDC: OIDCConfig{Audience: "x"}}.Validate(), "auth.oidc.issuer")
	require.ErrorContains(t, Config{CacheTTL: time.Minute}.Validate(), "auth.cache_ttl")
	require.ErrorContains(t, Config{Insecure: true, BootstrapToken: "0123456789abcdef0123456789abcdef"}.Validate(), "auth.insecure")
}
