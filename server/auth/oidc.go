package auth

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
)

// RoleClaimDefault is the claim OIDC roles are read from by default.
const RoleClaimDefault = "roles"

// OIDCConfig accepts JWT bearer tokens of an identity provider. The signature is checked
// against the issuer's keys (JWKS), and the issuer, the audience and the expiry against
// the claims, by github.com/coreos/go-oidc; only asymmetric algorithms are accepted, so
// neither "alg": "none" nor a token signed with the public key as an HMAC secret passes.
type OIDCConfig struct {
	// Issuer is the identity provider's issuer URL, exactly as in its tokens' "iss".
	// Empty turns OIDC off.
	Issuer string
	// Audience is the "aud" a token must carry (the client id given to rendezvous).
	// Required with Issuer.
	Audience string
	// JWKSURL is where the issuer's keys are; empty discovers it from
	// Issuer/.well-known/openid-configuration.
	JWKSURL string
	// RoleClaim names the claim holding the principal's roles: a string or an array of
	// strings, of which the known role names count and the most powerful wins. Default
	// RoleClaimDefault.
	RoleClaim string
}

func (c OIDCConfig) validate() error {
	if c.Issuer == "" {
		if c.Audience != "" || c.JWKSURL != "" {
			return errors.New("auth.oidc.issuer: required when an audience or a JWKS URL is set")
		}
		return nil
	}
	if u, err := url.Parse(c.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("auth.oidc.issuer: want an http(s) URL, not %q", c.Issuer)
	}
	if c.Audience == "" {
		return errors.New("auth.oidc.audience: required with an issuer (the client id tokens are issued for)")
	}
	return nil
}

// signingAlgs are the algorithms accepted: asymmetric only.
var signingAlgs = []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512, oidc.PS256, oidc.PS384, oidc.PS512, oidc.EdDSA}

type oidcVerifier struct {
	v         *oidc.IDTokenVerifier
	roleClaim string
}

func newOIDCVerifier(ctx context.Context, cfg OIDCConfig) (*oidcVerifier, error) {
	if cfg.RoleClaim == "" {
		cfg.RoleClaim = RoleClaimDefault
	}
	vc := &oidc.Config{ClientID: cfg.Audience, SupportedSigningAlgs: signingAlgs}
	// The key set fetches keys when a token names one it does not know, long after start:
	// it must not die with the start's context.
	keyCtx := context.WithoutCancel(ctx)
	var v *oidc.IDTokenVerifier
	if cfg.JWKSURL != "" {
		v = oidc.NewVerifier(cfg.Issuer, oidc.NewRemoteKeySet(keyCtx, cfg.JWKSURL), vc)
	} else {
		p, err := oidc.NewProvider(keyCtx, cfg.Issuer)
		if err != nil {
			return nil, fmt.Errorf("auth.oidc.issuer: discovery: %w", err)
		}
		v = p.Verifier(vc)
	}
	return &oidcVerifier{v: v, roleClaim: cfg.RoleClaim}, nil
}

// looksLikeJWT tells a JWT (three base64url parts) from an API token, which has no dot.
func looksLikeJWT(token string) bool {
	return strings.Count(token, ".") == 2
}

func (o *oidcVerifier) verify(ctx context.Context, raw string) (*Principal, error) {
	tok, err := o.v.Verify(ctx, raw)
	if err != nil {
		return nil, err
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return nil, err
	}
	var names []string
	switch v := claims[o.roleClaim].(type) {
	case string:
		names = []string{v}
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				names = append(names, s)
			}
		}
	}
	for _, r := range Roles {
		if slices.Contains(names, string(r)) {
			return &Principal{Name: tok.Subject, Kind: KindOIDC, Role: r}, nil
		}
	}
	return nil, fmt.Errorf("claim %q names no role (admin, operator, viewer, sender)", o.roleClaim)
}
