package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
	"github.com/rendezvous-run/rendezvous/server/auth"
)

const cliBootstrap = "cli-bootstrap-token-0123456789abcdef"

// TestCLITokensAndAudit drives token management and the audit log through the CLI
// against a service with authentication on: --token and RENDEZVOUS_TOKEN, a token shown
// once, listed without its secret, revoked, and the changes in the audit log.
func TestCLITokensAndAudit(t *testing.T) {
	cfg := replica.Config(t, dbtest.NewSchema(t).URL, "cli-auth")
	cfg.Auth = auth.Config{BootstrapToken: cliBootstrap}
	cfg.DBMaxConns = 4
	s := replica.Start(t, cfg)
	server := "http://" + s.Addr()
	cli := func(args ...string) cliResult {
		return runArgs("", append([]string{args[0], "--server", server}, args[1:]...)...)
	}

	r := cli("tokens", "list")
	require.Equal(t, exitRefused, r.code, "no token: %s", r.stderr)
	require.Contains(t, r.stderr, "401 unauthenticated")

	r = cli("tokens", "create", "ci", "--role", "operator", "--token", cliBootstrap)
	require.Equal(t, exitOK, r.code, r.stderr)
	secret := strings.TrimSpace(r.stdout)
	require.True(t, strings.HasPrefix(secret, auth.TokenPrefix), r.stdout)
	require.Contains(t, r.stderr, "not shown again")

	r = cli("tokens", "create", "billing", "--role", "sender", "--workflow-prefix", "billing-", "--expires-in", "24h", "-o", "json", "--token", cliBootstrap)
	require.Equal(t, exitOK, r.code, r.stderr)
	var created map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &created))
	require.Equal(t, "sender", created["role"])
	require.NotEmpty(t, created["expires_at"])

	// The operator token may not manage tokens: 403, exit status 1.
	t.Setenv("RENDEZVOUS_TOKEN", secret)
	r = cli("tokens", "list")
	require.Equal(t, exitRefused, r.code)
	require.Contains(t, r.stderr, "403 forbidden")
	r = cli("executions", "list")
	require.Equal(t, exitOK, r.code, "RENDEZVOUS_TOKEN is sent: %s", r.stderr)

	t.Setenv("RENDEZVOUS_TOKEN", cliBootstrap)
	r = cli("tokens", "list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "billing")
	require.Contains(t, r.stdout, "billing-")
	require.NotContains(t, r.stdout, secret, "never the secret")

	r = cli("tokens", "revoke", "ci")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "token ci revoked")
	r = cli("executions", "list", "--token", secret)
	require.Equal(t, exitRefused, r.code)
	require.Contains(t, r.stderr, "revoked")

	r = cli("audit", "list", "--action", "token.create", "-o", "json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, "token/billing", rows[0]["target"])
	require.Equal(t, "bootstrap:bootstrap", rows[0]["principal"])
	r = cli("audit", "list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "token.revoke")
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.1.2.3:0": true, "[::1]:8080": true, "localhost:8080": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "example.com:80": false, "nonsense": false,
	} {
		require.Equal(t, want, loopback(addr), addr)
	}
}

// TestDevStaysOnLoopbackWithoutAuth: dev without a token refuses to listen beyond this
// machine, before starting anything.
func TestDevStaysOnLoopbackWithoutAuth(t *testing.T) {
	var stdout, stderr strings.Builder
	require.Equal(t, 1, run([]string{"dev", "--http-addr", ":0", "--kafka-port", "0"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "loopback only")
	stderr.Reset()
	require.Equal(t, 1, run([]string{"dev", "--admin-addr", "0.0.0.0:0", "--kafka-port", "0"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "loopback only")
}
