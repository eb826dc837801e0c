package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// doctorLine is one thing make doctor checked: its status, what, and the detail — for a
// missing one, the command that installs it.
var doctorLine = regexp.MustCompile(`^(ok|missing|busy) +(port \d+|[a-z]+) +(\S.*)$`)

// runDoctor runs make doctor with env and returns its lines by item and its exit code. It fails on any line that is not the header, a checked
// thing or the verdict, and on a verdict that does not agree with the lines.
func runDoctor(t *testing.T, env []string, ports string) (map[string][2]string, int) {
	t.Helper()
	make, err := exec.LookPath("make")
	require.NoError(t, err)
	cmd := exec.Command(make, "-C", repoRoot, "--no-print-directory", "doctor", "PORTS="+ports)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err, string(out))
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if code != 0 {
		// make's own line about the recipe that failed.
		require.Regexp(t, `^make: \*\*\* \[.*doctor\] Error 1$`, lines[len(lines)-1], string(out))
		lines = lines[:len(lines)-1]
	}
	require.Equal(t, "rendezvous doctor: what make dev, the README and make test need", lines[0], string(out))
	items := map[string][2]string{}
	missing := 0
	for _, l := range lines[1 : len(lines)-1] {
		m := doctorLine.FindStringSubmatch(l)
		require.NotNil(t, m, "a line of make doctor: %q\n%s", l, out)
		items[m[2]] = [2]string{m[1], m[3]}
		if m[1] == "missing" {
			missing++
		}
	}
	verdict := lines[len(lines)-1]
	if missing == 0 {
		require.Equal(t, "nothing missing.", verdict, string(out))
		require.Equal(t, 0, code, string(out))
	} else {
		require.Equal(t, fmt.Sprintf("%d missing: install them with the commands above.", missing), verdict, string(out))
		require.Equal(t, 2, code, "make's status for a recipe that failed:\n%s", out)
	}
	for _, want := range []string{"go", "gcc", "node", "npm", "postgresql", "jq", "kcat", "chromium"} {
		require.Contains(t, items, want, "make doctor checks %s:\n%s", want, out)
	}
	return items, code
}

// TestMakeDoctor: make doctor checks each thing the README asks for, one line each, and
// says busy for a port something listens on. Without kcat on PATH it says kcat is
// missing, with the command that installs it, and fails.
func TestMakeDoctor(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	_, busyPort, _ := net.SplitHostPort(busy.Addr().String())
	_, freePort, _ := net.SplitHostPort(freePort(t))

	items, _ := runDoctor(t, os.Environ(), busyPort+" "+freePort)
	require.Equal(t, "busy", items["port "+busyPort][0])
	require.Contains(t, items["port "+busyPort][1], "DEV_FLAGS")
	require.Equal(t, [2]string{"ok", "free"}, items["port "+freePort])
	require.Equal(t, "ok", items["postgresql"][0], "the tests' own PostgreSQL answers: %s", items["postgresql"][1])

	// A PATH with everything the script and make use that this machine has, but kcat.
	bin := t.TempDir()
	for _, tool := range []string{"make", "bash", "env", "sed", "sort", "head", "id", "timeout", "dirname",
		"go", "gcc", "cc", "node", "npm", "psql", "jq", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(tool); err == nil {
			require.NoError(t, os.Symlink(p, filepath.Join(bin, tool)))
		}
	}
	env := append(os.Environ(), "PATH="+bin)
	items, code := runDoctor(t, env, freePort)
	require.NotEqual(t, 0, code)
	require.Equal(t, "missing", items["kcat"][0])
	require.Regexp(t, `^for the README and its tests: make deps \(or (sudo )?apt-get install -y kcat\)$`, items["kcat"][1])
	require.Equal(t, "ok", items["jq"][0], "jq is on the PATH: %s", items["jq"][1])
}

// TestMakeRun: make run starts as shipped — without a token in the environment with
// authentication off on loopback, with one requiring it — and answers the API.
func TestMakeRun(t *testing.T) {
	t.Parallel()
	schema := dbtest.NewSchema(t)
	bin := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RENDEZVOUS_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	token := strings.Repeat("r", 32)
	for _, tc := range []struct {
		name      string
		env       []string
		anonymous int // what an API call without a token gets
	}{
		{"no token: no authentication", env, http.StatusOK},
		{"bootstrap token: required", append(slices.Clone(env), "RENDEZVOUS_BOOTSTRAP_TOKEN="+token), http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := freePort(t)
			cmd := exec.Command("make", "-C", repoRoot, "--no-print-directory", "run",
				"BIN="+bin, "DATABASE_URL="+schema.URL, "RUN_FLAGS=--http-addr "+addr)
			cmd.Env = tc.env
			var logs lockedBuffer
			cmd.Stdout, cmd.Stderr = &logs, &logs
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					t.Errorf("make run did not stop 30 s after SIGTERM:\n%s", logs.String())
				}
			}()
			get := func(auth string) int {
				req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/workflows", nil)
				require.NoError(t, err)
				if auth != "" {
					req.Header.Set("Authorization", "Bearer "+auth)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return 0
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			require.Eventually(t, func() bool {
				select {
				case err := <-done:
					t.Fatalf("make run exited: %v\n%s", err, logs.String())
				default:
				}
				return get(token) == http.StatusOK
			}, 2*time.Minute, 100*time.Millisecond, "make run did not answer:\n%s", logs.String())
			require.Equal(t, tc.anonymous, get(""), logs.String())
			require.NotContains(t, logs.String(), token, "the token is not printed")
		})
	}
}
