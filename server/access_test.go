package server_test

// Access control against the running service: the route × role matrix over every
// operation of the OpenAPI document, a flood of refused requests, revocation seen by a
// second replica, a sender's workflow prefix, the audit rows of changes, the refusal to
// start without credentials, and the admin address.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/server/api"
	"github.com/rendezvous-run/rendezvous/server/auth"
)

// bootstrap is the tests' bootstrap admin token.
const bootstrap = "test-bootstrap-token-0123456789abcdef"

// expectedAccess is the matrix as specified, written out independently of the service's
// own table: for every operation of the OpenAPI document, the roles allowed ("public":
// no credential needed). An operation missing here fails TestAccessMatrix, so a new
// route cannot be added without a decision about who may call it.
var expectedAccess = map[string][]auth.Role{
	"GET /api/v1/workflows":                            {auth.RoleAdmin, auth.RoleOperator, auth.RoleViewer},
	"POST /api/v1/workflows/validate":                  {auth.RoleAdmin, auth.RoleOperator, auth.RoleViewer},
	"GET /api/v1/workflows/{name}":                     {auth.RoleAdmin, auth.RoleOperator, auth.RoleViewer},
	"PUT /api/v1/workflows/{name}":                     {auth.RoleAdmin},
	"POST /api/v1/workflows/{name}/executions":         {auth.RoleAdmin, auth.RoleOperator},
	"GET /api/v1/executions":                           {auth.RoleAdmin, auth.RoleOperator, auth.RoleViewer},
	"GET /api/v1/executions/{id}":                      {auth.RoleAdmin, auth.RoleOperator, auth.RoleViewer},
	"POST /api/v1/executions/{id}/cancel":              {auth.RoleAdmin, auth.RoleOperator},
	"POST /api/v1/executions/{id}/waits/{node}/cancel": {auth.RoleAdmin, auth.RoleOperator},
	"POST /api/v1/executions/{id}/events":              {auth.RoleAdmin, auth.RoleOperator, auth.RoleSender},
	"GET /api/v1/events/unmatched":                     {auth.RoleAdmin, auth.RoleOperator, auth.RoleViewer},
	"GET /api/v1/events/dead-letters":                  {auth.RoleAdmin, auth.RoleOperator, auth.RoleViewer},
	"GET /api/v1/wait-states":                          {auth.RoleAdmin, auth.RoleOperator, auth.RoleViewer},
	"GET /api/v1/wait-states/{id}":                     {auth.RoleAdmin, auth.RoleOperator, auth.RoleViewer},
	"GET /api/v1/whoami":                               {auth.RoleAdmin, auth.RoleOperator, auth.RoleViewer, auth.RoleSender},
	"GET /api/v1/tokens":                               {auth.RoleAdmin},
	"POST /api/v1/tokens":                              {auth.RoleAdmin},
	"POST /api/v1/tokens/{name}/revoke":                {auth.RoleAdmin},
	"GET /api/v1/audit":                                {auth.RoleAdmin},
	"POST /api/v1/executions/{id}/redrive":             {auth.RoleAdmin, auth.RoleOperator},
	"POST /api/v1/executions/redrive":                  {auth.RoleAdmin, auth.RoleOperator},
	"POST /api/v1/executions/{id}/restart":             {auth.RoleAdmin, auth.RoleOperator},
	"POST /api/v1/events/dead-letters/{id}/replay":     {auth.RoleAdmin, auth.RoleOperator},
	"POST /api/v1/events/dead-letters/{id}/dismiss":    {auth.RoleAdmin, auth.RoleOperator},
	"POST /api/v1/events/dead-letters/dismiss":         {auth.RoleAdmin, auth.RoleOperator},
	"POST /api/v1/events/unmatched/{id}/replay":        {auth.RoleAdmin, auth.RoleOperator},
	"POST /api/v1/events/unmatched/{id}/dismiss":       {auth.RoleAdmin, auth.RoleOperator},
	"POST /api/internal/callbacks/{service}":           nil,
	"GET /healthz":                                     nil,
	"GET /readyz":                                      nil,
	"GET /metrics":                                     nil,
	"GET /openapi.json":                                nil,
	"GET /schemas/{name}":                              nil,
	"GET /ui":                                          nil,
	"GET /ui/{path}":                                   nil,
}

// secured is a service with authentication on, and a token of each kind.
type secured struct {
	svc  *server.Service
	base string
	doc  *openAPI
	// tokens by credential name: "admin", "operator", "viewer", "sender", "revoked",
	// "expired", "forged".
	tokens map[string]string
}

func startSecured(t *testing.T, cfg server.Config) *secured {
	t.Helper()
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = dbtest.NewSchema(t).URL
	}
	cfg.AutoMigrate = true
	cfg.Auth.BootstrapToken = bootstrap
	if cfg.InstanceID == "" {
		cfg.InstanceID = "access"
	}
	s := runService(t, cfg)
	sec := &secured{svc: s, base: "http://" + s.AdminAddr(), tokens: map[string]string{"forged": auth.GenerateToken()}}
	sec.doc = loadOpenAPI(t, api.OpenAPI)
	for _, r := range auth.Roles {
		sec.tokens[string(r)] = sec.createToken(t, "t-"+string(r), r, "")
	}
	sec.tokens["revoked"] = sec.createToken(t, "t-revoked", auth.RoleAdmin, "")
	ex := sec.do(t, bootstrap, "POST", "/api/v1/tokens/t-revoked/revoke", nil)
	require.Equal(t, http.StatusOK, ex.status, "%s", ex.body)
	// An expired token cannot be created through the API (expires_at must be in the
	// future), so it is written as one that expired an hour ago.
	expired := auth.GenerateToken()
	h := sha256.Sum256([]byte(expired))
	past := time.Now().Add(-time.Hour)
	_, err := dbsqlc.New().APITokenInsert(context.Background(), s.Pool(), dbsqlc.APITokenInsertParams{
		ID: uuid.New(), Name: "t-expired", Role: string(auth.RoleAdmin), TokenSha256: h[:], ExpiresAt: &past})
	require.NoError(t, err)
	sec.tokens["expired"] = expired
	return sec
}

func (s *secured) createToken(t *testing.T, name string, role auth.Role, prefix string) string {
	t.Helper()
	ex := s.do(t, bootstrap, "POST", "/api/v1/tokens", map[string]any{"name": name, "role": role, "workflow_prefix": prefix})
	require.Equal(t, http.StatusCreated, ex.status, "%s", ex.body)
	tok, _ := ex.json["token"].(string)
	require.True(t, strings.HasPrefix(tok, auth.TokenPrefix), "%s", ex.body)
	return tok
}

// do sends a request with a bearer token (none when empty).
func (s *secured) do(t *testing.T, token, method, path string, body any) exchange {
	t.Helper()
	return doAt(t, s.base, token, method, path, body)
}

func doAt(t *testing.T, base, token, method, path string, body any) exchange {
	t.Helper()
	return exchangeOf(testkit.Do(t, method, base+path, body, testkit.Bearer(token)))
}

// concrete fills an OpenAPI path template with values that reach the handler.
func concrete(template string) string {
	r := strings.NewReplacer("{name}", "orders", "{id}", uuid.NewString(), "{node}", "wait",
		"{service}", "acme", "{path}", "index.html")
	return r.Replace(template)
}

// TestAccessMatrix tries every operation of the OpenAPI document without credentials,
// with a forged, a revoked and an expired token, and with a token of each role. The
// unauthenticated ones get 401, the roles not allowed 403, both as problems the
// document declares; the others reach the handler (whatever it answers then).
func TestAccessMatrix(t *testing.T) {
	t.Parallel()
	s := startSecured(t, server.Config{})
	ops := s.doc.operations()
	require.NotEmpty(t, ops)
	for _, op := range ops {
		_, ok := expectedAccess[op]
		require.True(t, ok, "%s: no access decision in expectedAccess (and so, presumably, none in server/access.go)", op)
	}
	require.Len(t, expectedAccess, len(ops), "expectedAccess names an operation the document does not have")

	creds := []string{"none", "forged", "revoked", "expired"}
	for _, r := range auth.Roles {
		creds = append(creds, string(r))
	}
	for _, op := range ops {
		method, template, _ := strings.Cut(op, " ")
		allowed := expectedAccess[op]
		for _, cred := range creds {
			t.Run(op+"/"+cred, func(t *testing.T) {
				path := concrete(template)
				hdr := map[string]string{}
				if cred != "none" {
					hdr["Authorization"] = "Bearer " + s.tokens[cred]
				}
				var body []byte
				if method != "GET" {
					body = []byte(`{}`)
				}
				ex := s.doc.call(t, s.base, method, template, path, body, hdr)
				role, isRole := auth.Role(cred), cred != "none" && cred != "forged" && cred != "revoked" && cred != "expired"
				switch {
				case allowed == nil:
					require.NotContains(t, []int{401, 403}, ex.status, "public route: %s", ex.body)
				case !isRole:
					require.Equal(t, http.StatusUnauthorized, ex.status, "%s", ex.body)
					require.Equal(t, problem.TypeBaseURI+"unauthenticated", ex.json["type"])
					require.Equal(t, `Bearer realm="rendezvous"`, ex.header.Get("WWW-Authenticate"))
				case containsRole(allowed, role):
					require.NotContains(t, []int{401, 403}, ex.status, "%s allowed: %s", role, ex.body)
				default:
					require.Equal(t, http.StatusForbidden, ex.status, "%s not allowed: %s", role, ex.body)
					require.Equal(t, problem.TypeBaseURI+"forbidden", ex.json["type"])
				}
			})
		}
	}
}

func containsRole(roles []auth.Role, r auth.Role) bool {
	for _, x := range roles {
		if x == r {
			return true
		}
	}
	return false
}

// TestRefusalFlood sends thousands of unauthenticated and wrong-role requests to every
// route that needs a credential, from several goroutines, and counts every answer: all
// are refused, and the refusal metric counts each one.
func TestRefusalFlood(t *testing.T) {
	t.Parallel()
	s := startSecured(t, server.Config{InstanceID: "flood"})
	type target struct{ method, template string }
	var targets []target
	for op, allowed := range expectedAccess {
		if allowed == nil {
			continue
		}
		method, template, _ := strings.Cut(op, " ")
		targets = append(targets, target{method, template})
	}
	bad := func(rng *rand.Rand, allowed []auth.Role) string {
		switch rng.IntN(5) {
		case 0:
			return ""
		case 1:
			return "Bearer " + auth.GenerateToken()
		case 2:
			return []string{"Basic YWRtaW46YWRtaW4=", "Bearer", "Bearer  ", "bearer a b", "Token " + bootstrap, "Bearer " + bootstrap + "x"}[rng.IntN(6)]
		case 3:
			return "Bearer " + s.tokens[[]string{"revoked", "expired"}[rng.IntN(2)]]
		}
		// A role the route does not allow, if there is one.
		for _, r := range auth.Roles {
			if !containsRole(allowed, r) {
				return "Bearer " + s.tokens[string(r)]
			}
		}
		return ""
	}
	const workers, perWorker = 8, 300
	var refused, accepted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			client := &http.Client{Timeout: 10 * time.Second}
			for range perWorker {
				tg := targets[rng.IntN(len(targets))]
				req, err := http.NewRequest(tg.method, s.base+concrete(tg.template), strings.NewReader(`{"name":"x","role":"admin"}`))
				if err != nil {
					t.Error(err)
					return
				}
				if h := bad(rng, expectedAccess[tg.method+" "+tg.template]); h != "" {
					req.Header.Set("Authorization", h)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
					refused.Add(1)
				} else {
					accepted.Add(1)
					t.Errorf("%s %s answered %d", tg.method, tg.template, resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(0), accepted.Load())
	require.Equal(t, int64(workers*perWorker), refused.Load())
	// Every refusal is counted by route and reason. The setup was refused nothing.
	require.Equal(t, float64(workers*perWorker), testkit.Scrape(t, s.base).Sum("rendezvous_http_auth_refused_total", nil))
}

// TestRevocationReachesEveryReplica: two replicas on one database. A token used on the
// second (which then trusts it for its cache's lifetime) and revoked through the first
// is refused by the second within that lifetime.
func TestRevocationReachesEveryReplica(t *testing.T) {
	t.Parallel()
	const ttl = 300 * time.Millisecond
	url := dbtest.NewSchema(t).URL
	a := startSecured(t, server.Config{DatabaseURL: url, InstanceID: "revoke-a", Auth: auth.Config{CacheTTL: ttl}})
	b := runService(t, server.Config{DatabaseURL: url, InstanceID: "revoke-b", Auth: auth.Config{BootstrapToken: bootstrap, CacheTTL: ttl}})
	bBase := "http://" + b.Addr()
	tok := a.createToken(t, "rotating", auth.RoleViewer, "")
	require.Equal(t, http.StatusOK, doAt(t, bBase, tok, "GET", "/api/v1/workflows", nil).status)

	ex := a.do(t, bootstrap, "POST", "/api/v1/tokens/rotating/revoke", nil)
	require.Equal(t, http.StatusOK, ex.status, "%s", ex.body)
	revoked := time.Now()
	// The bound is the cache's lifetime; the margin covers a loaded machine's scheduling.
	deadline := revoked.Add(ttl + 2*time.Second)
	for {
		ex := doAt(t, bBase, tok, "GET", "/api/v1/workflows", nil)
		if ex.status == http.StatusUnauthorized {
			require.Contains(t, string(ex.body), "revoked")
			t.Logf("refused by the second replica %s after the revocation", time.Since(revoked).Round(time.Millisecond))
			return
		}
		require.Equal(t, http.StatusOK, ex.status, "%s", ex.body)
		require.True(t, time.Now().Before(deadline), "the second replica still accepts a token revoked %s ago", time.Since(revoked))
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSenderWorkflowPrefix: a sender token limited to a prefix sends events to
// executions of those workflows only, and learns nothing of the others.
func TestSenderWorkflowPrefix(t *testing.T) {
	t.Parallel()
	s := startSecured(t, server.Config{InstanceID: "sender"})
	def := func(name string) map[string]any {
		return map[string]any{"name": name, "nodes": []any{map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
			"events": []any{map[string]any{"name": "approved", "source": "send", "type": "approved"}}}}}}
	}
	for _, name := range []string{"billing-refund", "orders"} {
		require.Equal(t, http.StatusCreated, s.do(t, bootstrap, "PUT", "/api/v1/workflows/"+name, def(name)).status)
	}
	start := func(name string) string {
		ex := s.do(t, s.tokens["operator"], "POST", "/api/v1/workflows/"+name+"/executions", map[string]any{"input": map[string]any{}})
		require.Equal(t, http.StatusCreated, ex.status, "%s", ex.body)
		return ex.json["id"].(string)
	}
	billing, orders := start("billing-refund"), start("orders")
	tok := s.createToken(t, "billing-events", auth.RoleSender, "billing-")
	event := map[string]any{"type": "approved", "payload": map[string]any{"ok": true}}

	ex := s.do(t, tok, "POST", "/api/v1/executions/"+orders+"/events", event)
	require.Equal(t, http.StatusForbidden, ex.status, "%s", ex.body)
	ex = s.do(t, tok, "POST", "/api/v1/executions/"+uuid.NewString()+"/events", event)
	require.Equal(t, http.StatusForbidden, ex.status, "an unknown execution is refused alike: %s", ex.body)
	ex = s.do(t, tok, "POST", "/api/v1/executions/"+billing+"/events", event)
	require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, ex.status, "%s", ex.body)
	// The unprefixed sender may send anywhere.
	ex = s.do(t, s.tokens["sender"], "POST", "/api/v1/executions/"+orders+"/events", event)
	require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, ex.status, "%s", ex.body)
	// And may not read what it sent to.
	require.Equal(t, http.StatusForbidden, s.do(t, tok, "GET", "/api/v1/executions/"+billing, nil).status)
	require.Equal(t, float64(2), testkit.Scrape(t, s.base).Sum("rendezvous_http_auth_refused_total", map[string]string{"reason": "workflow"}))
}

// TestAuditRows: each change through the API leaves its row, naming the principal, its
// address, the action, the target and the outcome; a refused change and a change that
// changed nothing leave theirs too; reads leave none.
func TestAuditRows(t *testing.T) {
	t.Parallel()
	s := startSecured(t, server.Config{InstanceID: "audit"})
	def := map[string]any{"name": "orders", "nodes": []any{map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
		"events": []any{map[string]any{"name": "approved", "source": "send", "type": "approved"}}}}}}
	require.Equal(t, http.StatusCreated, s.do(t, s.tokens["admin"], "PUT", "/api/v1/workflows/orders", def).status)
	require.Equal(t, http.StatusOK, s.do(t, s.tokens["admin"], "PUT", "/api/v1/workflows/orders", def).status)
	ex := s.do(t, s.tokens["operator"], "POST", "/api/v1/workflows/orders/executions", map[string]any{"input": map[string]any{}})
	require.Equal(t, http.StatusCreated, ex.status)
	id := ex.json["id"].(string)
	require.Equal(t, http.StatusAccepted, s.do(t, s.tokens["sender"], "POST", "/api/v1/executions/"+id+"/events", map[string]any{"type": "nobody-waits"}).status)
	require.Equal(t, http.StatusOK, s.do(t, s.tokens["operator"], "POST", "/api/v1/executions/"+id+"/cancel", map[string]any{"reason": "test"}).status)
	require.Equal(t, http.StatusNotFound, s.do(t, s.tokens["operator"], "POST", "/api/v1/workflows/nope/executions", nil).status)
	require.Equal(t, http.StatusOK, s.do(t, s.tokens["viewer"], "GET", "/api/v1/executions/"+id, nil).status)
	// A second execution, whose wait is cancelled once the executor has registered it.
	ex = s.do(t, s.tokens["operator"], "POST", "/api/v1/workflows/orders/executions", map[string]any{"input": map[string]any{}})
	require.Equal(t, http.StatusCreated, ex.status)
	id2 := ex.json["id"].(string)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ex = s.do(t, s.tokens["viewer"], "GET", "/api/v1/executions/"+id2, nil)
		if waits, _ := ex.json["wait_states"].([]any); len(waits) > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the wait was never registered: %s", ex.body)
	}
	ex = s.do(t, s.tokens["operator"], "POST", "/api/v1/executions/"+id2+"/waits/wait/cancel", map[string]any{"then": "fail", "reason": "lost"})
	require.Equal(t, http.StatusOK, ex.status, "%s", ex.body)
	// The failed execution is redriven once; a second redrive is refused, and audited too.
	ex = s.do(t, s.tokens["operator"], "POST", "/api/v1/executions/"+id2+"/redrive", nil)
	require.Equal(t, http.StatusOK, ex.status, "%s", ex.body)
	require.Equal(t, http.StatusConflict, s.do(t, s.tokens["operator"], "POST", "/api/v1/executions/"+id2+"/redrive", nil).status)

	ex = s.do(t, s.tokens["admin"], "GET", "/api/v1/audit?limit=500", nil)
	require.Equal(t, http.StatusOK, ex.status, "%s", ex.body)
	s.doc.call(t, s.base, "GET", "/api/v1/audit", "/api/v1/audit", nil, map[string]string{"Authorization": "Bearer " + s.tokens["admin"]})
	var page struct {
		Items []struct {
			Principal  string `json:"principal"`
			RemoteAddr string `json:"remote_addr"`
			Action     string `json:"action"`
			Target     string `json:"target"`
			Outcome    string `json:"outcome"`
		} `json:"items"`
	}
	raw, _ := json.Marshal(ex.json)
	require.NoError(t, json.Unmarshal(raw, &page))
	var got []string
	for i := len(page.Items) - 1; i >= 0; i-- { // oldest first
		r := page.Items[i]
		require.True(t, strings.HasPrefix(r.RemoteAddr, "127.0.0.1"), "remote address: %q", r.RemoteAddr)
		got = append(got, fmt.Sprintf("%s %s %s %s", r.Principal, r.Action, r.Target, r.Outcome))
	}
	want := []string{
		"bootstrap:bootstrap token.create token/t-admin ok",
		"bootstrap:bootstrap token.create token/t-operator ok",
		"bootstrap:bootstrap token.create token/t-viewer ok",
		"bootstrap:bootstrap token.create token/t-sender ok",
		"bootstrap:bootstrap token.create token/t-revoked ok",
		"bootstrap:bootstrap token.revoke token/t-revoked ok",
		"token:t-admin workflow.store workflow/orders ok",
		"token:t-admin workflow.store /api/v1/workflows/orders unchanged",
		"token:t-operator execution.start execution/" + id + " ok",
		"token:t-sender event.send execution/" + id + " buffered",
		"token:t-operator execution.cancel execution/" + id + " ok",
		"token:t-operator execution.start /api/v1/workflows/nope/executions refused 404",
		"token:t-operator execution.start execution/" + id2 + " ok",
		"token:t-operator wait.cancel execution/" + id2 + "/waits/wait ok",
		"token:t-operator execution.redrive execution/" + id2 + " ok",
		"token:t-operator execution.redrive /api/v1/executions/" + id2 + "/redrive refused 409",
	}
	require.Equal(t, want, got)

	// Filters and pages.
	ex = s.do(t, s.tokens["admin"], "GET", "/api/v1/audit?action=token.create&limit=2", nil)
	require.Len(t, ex.json["items"], 2)
	next, _ := ex.json["next_cursor"].(string)
	require.NotEmpty(t, next)
	ex = s.do(t, s.tokens["admin"], "GET", "/api/v1/audit?action=token.create&limit=5&cursor="+next, nil)
	require.Len(t, ex.json["items"], 3)
	require.Empty(t, ex.json["next_cursor"])
	require.Equal(t, http.StatusBadRequest, s.do(t, s.tokens["admin"], "GET", "/api/v1/audit?cursor=bogus", nil).status)
}

// TestServeRefusesWithoutCredentials: a service with no way to authenticate does not
// start, unless told to run without authentication; an admin token in the database is
// a way in.
func TestServeRefusesWithoutCredentials(t *testing.T) {
	t.Parallel()
	schema := dbtest.NewSchema(t)
	cfg := server.Config{DatabaseURL: schema.URL, HTTPAddr: "127.0.0.1:0", InstanceID: "no-auth", AutoMigrate: true,
		Logger: slog.New(slog.DiscardHandler)}
	_, err := server.New(context.Background(), cfg)
	require.ErrorContains(t, err, "RENDEZVOUS_BOOTSTRAP_TOKEN")
	require.ErrorContains(t, err, "--insecure-no-auth")

	short := cfg
	short.Auth.BootstrapToken = "too-short"
	_, err = server.New(context.Background(), short)
	require.ErrorContains(t, err, "auth.bootstrap_token")

	insecure := cfg
	insecure.Auth.Insecure = true
	s, err := server.New(context.Background(), insecure)
	require.NoError(t, err)
	_, err = s.Auth.Store().Create(context.Background(), auth.NewToken{Name: "first-admin", Role: auth.RoleAdmin})
	require.NoError(t, err)
	s.Close()

	s, err = server.New(context.Background(), cfg)
	require.NoError(t, err, "an admin token in the database is a way in")
	s.Close()
}

// TestAdminAddr: with an admin address the public one carries only callbacks and
// probes, and the admin one the API, the web view, the documents and the metrics.
func TestAdminAddr(t *testing.T) {
	t.Parallel()
	s := startSecured(t, server.Config{InstanceID: "admin-addr", AdminAddr: "127.0.0.1:0"})
	public := "http://" + s.svc.Addr()
	require.NotEqual(t, public, s.base)
	for _, path := range []string{"/api/v1/workflows", "/ui/", "/openapi.json", "/schemas/workflow.json", "/metrics"} {
		require.Equal(t, http.StatusNotFound, doAt(t, public, s.tokens["admin"], "GET", path, nil).status, path)
		require.Equal(t, http.StatusOK, doAt(t, s.base, s.tokens["admin"], "GET", path, nil).status, path)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		require.Equal(t, http.StatusOK, doAt(t, public, "", "GET", path, nil).status, path)
	}
	// The callback route is public there: an unknown correlation reaches the handler,
	// which answers it, without a bearer token.
	ex := doAt(t, public, "", "POST", "/api/internal/callbacks/acme", map[string]any{"execution_id": uuid.NewString(), "correlation_id": uuid.NewString()})
	require.Equal(t, problem.TypeBaseURI+"wait-not-found", ex.json["type"], "%s", ex.body)
	require.Contains(t, s.svc.Routes(), "POST /api/internal/callbacks/:service")
}

// TestEveryRouteHasAnAccessDecision: the service's own table covers every route it
// serves.
func TestEveryRouteHasAnAccessDecision(t *testing.T) {
	t.Parallel()
	s := runService(t, server.Config{DatabaseURL: dbtest.NewSchema(t).URL, InstanceID: "routes"})
	for _, r := range s.Routes() {
		_, ok := server.RouteAccess(r)
		require.True(t, ok, r)
	}
}

// TestTokenAnswersAsDocumented: the token routes' answers validate against the OpenAPI
// document, and the secret is in the creation's answer only.
func TestTokenAnswersAsDocumented(t *testing.T) {
	t.Parallel()
	s := startSecured(t, server.Config{InstanceID: "token-doc"})
	hdr := map[string]string{"Authorization": "Bearer " + bootstrap}
	body := []byte(`{"name": "doc", "role": "sender", "workflow_prefix": "billing-", "expires_at": "2099-01-02T03:04:05Z"}`)
	ex := s.doc.call(t, s.base, "POST", "/api/v1/tokens", "/api/v1/tokens", body, hdr)
	require.Equal(t, http.StatusCreated, ex.status, "%s", ex.body)
	secret := ex.json["token"].(string)
	require.Equal(t, http.StatusConflict, s.doc.call(t, s.base, "POST", "/api/v1/tokens", "/api/v1/tokens", body, hdr).status)
	ex = s.doc.call(t, s.base, "POST", "/api/v1/tokens", "/api/v1/tokens", []byte(`{"name": "x", "role": "viewer", "workflow_prefix": "a"}`), hdr)
	require.Equal(t, http.StatusBadRequest, ex.status)
	require.Equal(t, "workflow_prefix", ex.json["field"])
	ex = s.doc.call(t, s.base, "GET", "/api/v1/tokens", "/api/v1/tokens?limit=2", nil, hdr)
	require.Equal(t, http.StatusOK, ex.status)
	require.NotContains(t, string(ex.body), secret)
	require.NotContains(t, string(ex.body), `"token"`)
	require.NotEmpty(t, ex.json["next_cursor"])
	ex = s.doc.call(t, s.base, "POST", "/api/v1/tokens/{name}/revoke", "/api/v1/tokens/doc/revoke", nil, hdr)
	require.Equal(t, http.StatusOK, ex.status)
	require.NotEmpty(t, ex.json["revoked_at"])
	require.Equal(t, http.StatusNotFound, s.doc.call(t, s.base, "POST", "/api/v1/tokens/{name}/revoke", "/api/v1/tokens/nope/revoke", nil, hdr).status)
	ex = s.doc.call(t, s.base, "GET", "/api/v1/whoami", "/api/v1/whoami", nil, map[string]string{"Authorization": "Bearer " + s.tokens["viewer"]})
	require.Equal(t, map[string]any{"name": "t-viewer", "kind": "token", "role": "viewer"}, ex.json)
}
