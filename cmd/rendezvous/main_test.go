package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/server"
)

// buildBinary compiles the command once per test run, as users run it.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rendezvous")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func TestServeMigrateAndSIGTERM(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	schema := dbtest.NewSchema(t) // already migrated: migrate must then be a no-op

	out, err := exec.Command(bin, "migrate", "--database-url", schema.URL, "--log-format", "text").CombinedOutput()
	require.NoError(t, err, string(out))

	addr := freePort(t)
	cmd := exec.Command(bin, "serve", "--http-addr", addr, "--instance-id", "sigterm-test")
	// As deployed: authentication on, with a bootstrap token.
	cmd.Env = append(os.Environ(), "DATABASE_URL="+schema.URL, "RENDEZVOUS_BOOTSTRAP_TOKEN="+strings.Repeat("t", 32))
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, logs.String())

	// As a user would try it, with curl: the API refuses a request without the token
	// and answers one with it; the probes need none.
	token := strings.Repeat("t", 32)
	curl := func(args ...string) string {
		out, err := exec.Command("curl", append([]string{"-s", "-o", "/dev/null", "-w", "%{http_code}"}, args...)...).Output()
		require.NoError(t, err)
		return string(out)
	}
	require.Equal(t, "401", curl("http://"+addr+"/api/v1/workflows"))
	require.Equal(t, "401", curl("-H", "Authorization: Bearer "+strings.Repeat("x", 32), "http://"+addr+"/api/v1/workflows"))
	require.Equal(t, "200", curl("-H", "Authorization: Bearer "+token, "http://"+addr+"/api/v1/workflows"))
	require.Equal(t, "200", curl("http://"+addr+"/healthz"))

	// What the image's HEALTHCHECK runs, against a real replica.
	out, err = exec.Command(bin, "healthcheck", "--http-addr", addr).CombinedOutput()
	require.NoError(t, err, "healthcheck of a running replica: %s", out)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "exit after SIGTERM must be 0; logs:\n%s", logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit 30 s after SIGTERM; logs:\n%s", logs.String())
	}
	require.Contains(t, logs.String(), `"instance_id":"sigterm-test"`)
	require.Contains(t, logs.String(), "stopped")

	// Shutdown says how long each stage took, each loop's time within its stage, so that
	// a replica killed at the end of its grace period has said what held it.
	var stages []string
	var loops map[string]any
	for line := range strings.Lines(logs.String()) {
		var l struct {
			Msg      string         `json:"msg"`
			Stage    string         `json:"stage"`
			Duration *int64         `json:"duration"`
			Loops    map[string]any `json:"loops"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || (l.Msg != server.LogShutdownStage && l.Msg != server.LogStopped) {
			continue
		}
		require.NotNil(t, l.Duration, "a duration on %s", line)
		if l.Msg == server.LogStopped {
			stages = append(stages, "(stopped)")
			continue
		}
		stages = append(stages, l.Stage)
		if l.Stage == "work" {
			loops = l.Loops
		}
	}
	// No broker was given: there is no Kafka intake to stop.
	require.Equal(t, []string{"http", "work", "database pool", "telemetry", "(stopped)"}, stages, logs.String())
	for _, name := range []string{"run queue workers", "outbox sender", "deadline sweeper"} {
		require.Contains(t, loops, name, "the work stage times each loop")
	}
}

// lockedBuffer collects a child's output while the test reads it.
type lockedBuffer = testkit.Buffer

func TestCommandLine(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"version"}, &stdout, &stderr))
	require.NotEmpty(t, strings.TrimSpace(stdout.String()))

	stdout.Reset()
	require.Equal(t, 2, run([]string{"frobnicate"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), `unknown command "frobnicate"`)

	stderr.Reset()
	require.Equal(t, 1, run([]string{"serve", "--database-url", ""}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "database_url: must not be empty")

	stderr.Reset()
	require.Equal(t, 1, run([]string{"serve", "--workers", "many"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "not an integer")

	// Secure by default: no way to authenticate, no start.
	stderr.Reset()
	require.Equal(t, 1, run([]string{"serve", "--database-url", dbtest.NewSchema(t).URL, "--http-addr", "127.0.0.1:0"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "no way to authenticate")
	require.Contains(t, stderr.String(), "--insecure-no-auth")
}

// TestMain removes the binary the deployment tests build once for the whole run.
func TestMain(m *testing.M) {
	// The README's recipes run several replicas as processes: the server is theirs.
	testkit.NeedsWholeServer()
	// The tests run make as a person does: not as a sub-make of make test, whose
	// variables would make it print "make[1]" and pass its flags on.
	for _, v := range []string{"MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES"} {
		_ = os.Unsetenv(v)
	}
	testkit.VerifyTestMain(m, func() {
		if release.dir != "" {
			_ = os.RemoveAll(release.dir)
		}
	})
}

// TestDurationsAsDefinitionsWriteThem: flags, environment variables and the CLI's points
// in time read durations as definitions do — Go, ISO-8601 or words — and a bad one is
// refused with the forms; a negative Go duration still means "off" where a flag says so.
func TestDurationsAsDefinitionsWriteThem(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"90s": 90 * time.Second, "PT90M": 90 * time.Minute, "30 minutes": 30 * time.Minute, "1 hour": time.Hour, "2 days": 48 * time.Hour, "-1s": -time.Second} {
		got, err := parseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := parseDuration("soon")
	require.ErrorContains(t, err, `not a duration: invalid duration "soon": want a Go duration such as 90m or 1h30m, ISO-8601 such as PT90M or P2D, or a number and a unit such as "90 minutes"`)

	var stdout, stderr bytes.Buffer
	require.Equal(t, 1, run([]string{"serve", "--lease", "3 fortnights"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), `invalid duration "3 fortnights"`)

	at, err := pointInTime("--created-from", "2 days")
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(-48*time.Hour), *at, time.Minute)
	_, err = pointInTime("--created-from", "yesterday")
	require.ErrorContains(t, err, `neither a duration (2h, PT2H, "2 hours") nor an RFC 3339 time`)
}
