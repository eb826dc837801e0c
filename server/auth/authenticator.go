package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/rendezvous-run/rendezvous/internal/problem"
)

// Defaults and bounds of Config.
const (
	// CacheTTLDefault is how long a replica trusts what it read of a token: a revoked
	// token is refused everywhere at most this long after the revocation committed.
	CacheTTLDefault = 2 * time.Second
	// CacheTTLMax bounds CacheTTL, so that revocation stays a matter of seconds.
	CacheTTLMax = 10 * time.Second
	// BootstrapTokenMinLength is the shortest bootstrap token accepted.
	BootstrapTokenMinLength = 32
	// cacheMaxEntries bounds the token cache; a flood of forged tokens empties it rather
	// than growing it.
	cacheMaxEntries = 10000
)

// Config configures an Authenticator.
type Config struct {
	// BootstrapToken, when set, is an admin token that exists without the database
	// (RENDEZVOUS_BOOTSTRAP_TOKEN), so that a fresh deployment can create the others. At
	// least BootstrapTokenMinLength characters of a bearer token's alphabet.
	BootstrapToken string
	// Insecure turns authentication off: every request is an admin. Default false.
	Insecure bool
	// CacheTTL is how long a looked-up token is trusted. Default CacheTTLDefault, at
	// most CacheTTLMax.
	CacheTTL time.Duration
	// OIDC, when its Issuer is set, accepts JWTs of that identity provider.
	OIDC OIDCConfig
	// MeterProvider counts refusals; default a no-op.
	MeterProvider metric.MeterProvider
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.CacheTTL <= 0 {
		c.CacheTTL = CacheTTLDefault
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	return c
}

// Validate checks c; its messages name the field.
func (c Config) Validate() error {
	if c.Insecure && (c.BootstrapToken != "" || c.OIDC.Issuer != "") {
		return errors.New("auth.insecure: authentication cannot be off while a bootstrap token or an OIDC issuer is configured; drop one or the other")
	}
	if c.CacheTTL > CacheTTLMax {
		return fmt.Errorf("auth.cache_ttl: at most %s, so that a revoked token stops working within seconds", CacheTTLMax)
	}
	if c.BootstrapToken != "" {
		if len(c.BootstrapToken) < BootstrapTokenMinLength {
			return fmt.Errorf("auth.bootstrap_token: at least %d characters (generate one with: openssl rand -hex 32)", BootstrapTokenMinLength)
		}
		if tok, err := ParseBearer("Bearer " + c.BootstrapToken); err != nil || tok != c.BootstrapToken {
			return errors.New("auth.bootstrap_token: only letters, digits and -._~+/ (then optional =) may appear in a bearer token")
		}
	}
	return c.OIDC.validate()
}

// Refusal reasons, the "reason" attribute of the refusal metric.
const (
	ReasonMissing   = "missing"   // no Authorization header (401)
	ReasonMalformed = "malformed" // not "Bearer <token>" (401)
	ReasonUnknown   = "unknown"   // no such token, or a JWT that fails validation (401)
	ReasonRevoked   = "revoked"   // a revoked token (401)
	ReasonExpired   = "expired"   // an expired token (401)
	ReasonRole      = "role"      // the principal's role does not allow the route (403)
	ReasonWorkflow  = "workflow"  // a sender outside its workflow prefix (403)
)

// Reasons lists every refusal reason.
var Reasons = []string{ReasonMissing, ReasonMalformed, ReasonUnknown, ReasonRevoked, ReasonExpired, ReasonRole, ReasonWorkflow}

// authError is a credential that does not authenticate, with its reason.
type authError struct{ reason, detail string }

func (e *authError) Error() string { return e.detail }

// Authenticator decides who a request comes from and whether that one may use a route.
type Authenticator struct {
	cfg       Config
	store     *Store
	bootstrap []byte // sha256 of the bootstrap token, nil without one
	oidc      *oidcVerifier
	now       func() time.Time
	refused   metric.Int64Counter

	mu    sync.Mutex
	cache map[[32]byte]cachedToken
}

type cachedToken struct {
	p         *Principal
	expiresAt *time.Time
	revoked   bool
	found     bool
	at        time.Time
}

// New returns an Authenticator of the tokens of pool. With an OIDC issuer it fetches
// the issuer's discovery document, so ctx bounds that.
func New(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Authenticator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Authenticator{cfg: cfg, store: NewStore(pool), now: time.Now, cache: map[[32]byte]cachedToken{}}
	a.store.revoked = a.forget
	if cfg.BootstrapToken != "" {
		a.bootstrap = hashToken(cfg.BootstrapToken)
	}
	if cfg.OIDC.Issuer != "" {
		v, err := newOIDCVerifier(ctx, cfg.OIDC)
		if err != nil {
			return nil, err
		}
		a.oidc = v
	}
	var err error
	a.refused, err = cfg.MeterProvider.Meter("github.com/rendezvous-run/rendezvous/server/auth").Int64Counter(
		"rendezvous.http.auth.refused",
		metric.WithDescription("Requests refused before their handler ran, by route and reason (missing, malformed, unknown, revoked, expired: 401; role, workflow: 403)."))
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Store is the token store the Authenticator reads.
func (a *Authenticator) Store() *Store { return a.store }

// Insecure reports whether authentication is off.
func (a *Authenticator) Insecure() bool { return a.cfg.Insecure }

// HasCredentials reports whether anybody can authenticate: a bootstrap token, an OIDC
// issuer, or a usable (neither revoked nor expired) admin token in the database.
func (a *Authenticator) HasCredentials(ctx context.Context) (bool, error) {
	if a.bootstrap != nil || a.oidc != nil {
		return true, nil
	}
	after := ""
	for {
		page, more, err := a.store.List(ctx, after, 500)
		if err != nil {
			return false, err
		}
		for _, t := range page {
			if t.Role == RoleAdmin && t.RevokedAt == nil && (t.ExpiresAt == nil || t.ExpiresAt.After(a.now())) {
				return true, nil
			}
		}
		if !more {
			return false, nil
		}
		after = page[len(page)-1].Name
	}
}

// insecurePrincipal is everybody when authentication is off.
var insecurePrincipal = &Principal{Name: "anonymous", Kind: KindInsecure, Role: RoleAdmin}

// Authenticate returns the principal of an Authorization header value.
func (a *Authenticator) Authenticate(ctx context.Context, header string) (*Principal, error) {
	if a.cfg.Insecure {
		return insecurePrincipal, nil
	}
	token, err := ParseBearer(header)
	switch {
	case errors.Is(err, ErrNoCredential):
		return nil, &authError{ReasonMissing, "this route needs a bearer token (Authorization: Bearer <token>)"}
	case err != nil:
		return nil, &authError{ReasonMalformed, err.Error()}
	}
	h := sha256.Sum256([]byte(token))
	if a.bootstrap != nil && subtle.ConstantTimeCompare(h[:], a.bootstrap) == 1 {
		return &Principal{Name: "bootstrap", Kind: KindBootstrap, Role: RoleAdmin}, nil
	}
	if a.oidc != nil && looksLikeJWT(token) {
		p, err := a.oidc.verify(ctx, token)
		if err != nil {
			return nil, &authError{ReasonUnknown, "the bearer token is not valid: " + err.Error()}
		}
		return p, nil
	}
	ct, err := a.lookup(ctx, h)
	if err != nil {
		return nil, err
	}
	switch {
	case !ct.found:
		return nil, &authError{ReasonUnknown, "the bearer token is not valid"}
	case ct.revoked:
		return nil, &authError{ReasonRevoked, "the bearer token was revoked"}
	case ct.expiresAt != nil && !a.now().Before(*ct.expiresAt):
		return nil, &authError{ReasonExpired, "the bearer token expired"}
	}
	return ct.p, nil
}

// lookup reads a token by hash, through a cache trusted for CacheTTL.
func (a *Authenticator) lookup(ctx context.Context, h [32]byte) (cachedToken, error) {
	now := a.now()
	a.mu.Lock()
	ct, ok := a.cache[h]
	a.mu.Unlock()
	if ok && now.Sub(ct.at) < a.cfg.CacheTTL {
		return ct, nil
	}
	row, err := a.store.lookup(ctx, h[:])
	ct = cachedToken{at: now}
	switch {
	case errors.Is(err, ErrTokenNotFound):
	case err != nil:
		return ct, fmt.Errorf("look up token: %w", err)
	default:
		t := tokenOf(row)
		ct.found, ct.revoked, ct.expiresAt = true, t.RevokedAt != nil, t.ExpiresAt
		ct.p = &Principal{Name: t.Name, Kind: KindToken, Role: t.Role, WorkflowPrefix: t.WorkflowPrefix}
	}
	a.mu.Lock()
	if len(a.cache) >= cacheMaxEntries {
		clear(a.cache)
	}
	a.cache[h] = ct
	a.mu.Unlock()
	return ct, nil
}

// forget drops every cached token, so that a revocation made through this replica holds
// here from the next request on.
func (a *Authenticator) forget() {
	a.mu.Lock()
	clear(a.cache)
	a.mu.Unlock()
}

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal of a request that went through Middleware, or nil.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// Unauthenticated is the 401 problem of a request without a valid credential.
func Unauthenticated(detail string) *problem.Problem {
	return problem.New(http.StatusUnauthorized, detail).WithType("unauthenticated")
}

// Forbidden is the 403 problem of a principal whose role does not allow the route.
func Forbidden(detail string) *problem.Problem {
	return problem.New(http.StatusForbidden, detail).WithType("forbidden")
}

// Refuse counts a refusal of route for reason and returns its problem; handlers that
// refuse for a reason of their own (a sender outside its prefix) use it too.
func (a *Authenticator) Refuse(ctx context.Context, route, reason string, p *problem.Problem) *problem.Problem {
	a.refused.Add(ctx, 1, metric.WithAttributes(attribute.String("http.route", route), attribute.String("reason", reason)))
	return p
}

// Middleware checks every request against the access its route needs: access returns
// it for a method and an Echo route path, and false for a route it does not know,
// which only an admin may use. A request whose route is Public passes untouched; any
// other gets its principal in its context, or a 401 or 403 problem.
func (a *Authenticator) Middleware(access func(method, path string) (Access, bool)) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			need, ok := access(req.Method, c.Path())
			if !ok {
				need = Admin
			}
			if need == Public {
				return next(c)
			}
			ctx := req.Context()
			p, err := a.Authenticate(ctx, req.Header.Get(echo.HeaderAuthorization))
			if ae, ok := errors.AsType[*authError](err); ok {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="rendezvous"`)
				return a.Refuse(ctx, c.Path(), ae.reason, Unauthenticated(ae.detail))
			}
			if err != nil {
				return err
			}
			if !p.Role.Allows(need) {
				return a.Refuse(ctx, c.Path(), ReasonRole, Forbidden(fmt.Sprintf("role %s may not use %s %s (needs %s)", p.Role, req.Method, c.Path(), need)))
			}
			c.SetRequest(req.WithContext(NewContext(ctx, p)))
			return next(c)
		}
	}
}
