package server_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/server/auth"
)

// TestDatabaseAwayAnswers503: while PostgreSQL is unreachable, a request that needed it
// is answered 503 with Retry-After and an "unavailable" problem — not a bare 500 — on
// every route: one whose operator's token needed the database to authenticate, a
// redrive, a list, a start, a revocation. Once the database is back, the same requests
// get their ordinary answers, and the revocation had changed nothing (the operator's
// token still works).
func TestDatabaseAwayAnswers503(t *testing.T) {
	t.Parallel()
	_, proxied, proxy := dbtest.ProxiedSchema(t)
	var logs syncBuffer
	s := runService(t, server.Config{
		DatabaseURL: proxied, InstanceID: "unavailable", DBMaxConns: 4, AutoMigrate: true,
		Auth:   auth.Config{BootstrapToken: bootstrap, CacheTTL: time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	base := "http://" + s.AdminAddr()
	created := doAt(t, base, bootstrap, http.MethodPost, "/api/v1/tokens", map[string]any{"name": "t-op", "role": auth.RoleOperator})
	require.Equal(t, http.StatusCreated, created.status, "%s", created.body)
	operator, _ := created.json["token"].(string)
	require.NotEmpty(t, operator)
	redrive := "/api/v1/executions/" + uuid.NewString() + "/redrive"

	type call struct{ token, method, path string }
	calls := map[string]call{
		"an operator's token looked up":   {operator, http.MethodGet, "/api/v1/executions"},
		"a redrive read the execution":    {bootstrap, http.MethodPost, redrive},
		"a list read the dead letters":    {bootstrap, http.MethodGet, "/api/v1/events/dead-letters"},
		"a start read the workflow":       {bootstrap, http.MethodPost, "/api/v1/workflows/nope/executions"},
		"a token revocation":              {bootstrap, http.MethodPost, "/api/v1/tokens/t-op/revoke"},
		"an operator's redrive, the same": {operator, http.MethodPost, redrive},
	}
	proxy.Cut()
	for what, c := range calls {
		ex := doAt(t, base, c.token, c.method, c.path, nil)
		require.Equal(t, http.StatusServiceUnavailable, ex.status, "%s: %s", what, ex.body)
		require.Equal(t, problem.TypeBaseURI+"unavailable", ex.json["type"], "%s: %s", what, ex.body)
		require.Equal(t, "1", ex.header.Get("Retry-After"), what)
		require.Equal(t, problem.ContentType, ex.header.Get("Content-Type"), what)
	}
	require.Contains(t, logs.String(), "request failed: database unavailable")
	require.NotContains(t, logs.String(), `msg="request failed"`, "no request was answered as an internal error")
	// The redrive's audit row could not be written either: its line holds what the row
	// would have, who asked and what they were answered included. (The operator's redrive
	// failed authenticating, before anything was audited.) The operator-action line
	// names the same answer.
	var unaudited, actions []string
	for line := range strings.Lines(logs.String()) {
		switch {
		case strings.Contains(line, `msg="audit row not written"`) && strings.Contains(line, "action=execution.redrive"):
			unaudited = append(unaudited, line)
		case strings.Contains(line, `msg="operator action"`) && strings.Contains(line, "action=execution.redrive"):
			actions = append(actions, line)
		}
	}
	require.Len(t, unaudited, 1, "%s", logs.String())
	require.Contains(t, unaudited[0], "status=503")
	require.Contains(t, unaudited[0], "target="+redrive)
	require.Contains(t, unaudited[0], "principal=bootstrap:")
	require.Len(t, actions, 1, "%s", logs.String())
	require.Contains(t, actions[0], "status=503")

	proxy.Restore()
	want := map[string]int{
		"an operator's token looked up": http.StatusOK, "a redrive read the execution": http.StatusNotFound,
		"a list read the dead letters": http.StatusOK, "a start read the workflow": http.StatusNotFound,
	}
	require.Eventually(t, func() bool {
		for what, status := range want {
			c := calls[what]
			if ex := doAt(t, base, c.token, c.method, c.path, nil); ex.status != status {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "the ordinary answers once the database is back")
}
