package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
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

// TestMakeDevStops: `make dev` stopped as a person or a script stops it — dev shuts
// down cleanly and exits 0, and so does make: no "make: *** … Interrupt", no 130.
//
//   - Ctrl-C typed into its terminal: the terminal sends SIGINT to its foreground
//     process group, which dev made its own (takeTerminal), so make does not get it —
//     with make's stdin the terminal, and with stdin elsewhere.
//   - No terminal, SIGINT to make's process group, make started with SIGINT ignored
//     (`trap ” INT; make dev`, or `make dev &` in a script): make ignores it, dev
//     takes it (Go installs its handler although the signal was ignored at start).
//   - No terminal, SIGINT to dev's pid, which its banner prints.
//
// What no Makefile can change, and so is not here: GNU make that itself receives a
// SIGINT it did not ignore at start waits for its child, then kills itself with the
// signal (exit 130) whatever the child did.
func TestMakeDevStops(t *testing.T) {
	t.Parallel()
	schema := dbtest.NewSchema(t)
	bin := t.TempDir()
	makeDev := func(shell string) *exec.Cmd {
		args := []string{"make", "-C", repoRoot, "--no-print-directory", "dev", "BIN=" + bin,
			"DATABASE_URL=" + schema.URL, "DEV_FLAGS=--http-addr 127.0.0.1:0 --kafka-port 0 --example-service-addr 127.0.0.1:0"}
		if shell == "" {
			return exec.Command(args[0], args[1:]...)
		}
		quoted := make([]string, len(args))
		for i, a := range args {
			quoted[i] = "'" + a + "'"
		}
		return exec.Command("sh", "-c", shell+" "+strings.Join(quoted, " "))
	}
	// A terminal ends its lines with \r\n.
	pidLine := regexp.MustCompile(`(?m)^  stop +Ctrl-C, or kill -INT (\d+) \(exits 0\)\r?$`)
	// stopped waits for dev's banner, stops it with stop, and requires make's exit 0.
	stopped := func(t *testing.T, cmd *exec.Cmd, logs *lockedBuffer, output <-chan struct{}, stop func(devPid int)) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		exited := false
		defer func() {
			if !exited {
				// dev may lead a group of its own (takeTerminal): kill both.
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				if m := pidLine.FindStringSubmatch(logs.String()); m != nil {
					pid, _ := strconv.Atoi(m[1])
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				<-done
			}
		}()
		if !assert.Eventually(t, func() bool { return pidLine.MatchString(logs.String()) }, 2*time.Minute, 100*time.Millisecond) {
			t.Fatalf("dev did not start:\n%s", logs.String())
		}
		devPid, err := strconv.Atoi(pidLine.FindStringSubmatch(logs.String())[1])
		require.NoError(t, err)
		stop(devPid)
		select {
		case err = <-done:
			exited = true
		case <-time.After(time.Minute):
			t.Fatalf("make dev did not stop a minute after SIGINT:\n%s", logs.String())
		}
		if output != nil {
			<-output // the terminal's output to its end: every process holding it has exited
		}
		out := logs.String()
		require.NoError(t, err, "make dev's exit status:\n%s", out)
		require.NotRegexp(t, `make: \*\*\* `, out)
		require.Contains(t, out, "stopped", "the binary shut down cleanly")
	}

	// In a terminal, make leading a session whose controlling terminal it is.
	inTerminal := func(t *testing.T, stdinElsewhere bool) {
		ptmx, tty, err := pty.Open()
		require.NoError(t, err)
		defer ptmx.Close()
		cmd := makeDev("")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if stdinElsewhere {
			devNull, err := os.Open(os.DevNull)
			require.NoError(t, err)
			defer devNull.Close()
			cmd.Stdin = devNull
			cmd.SysProcAttr.Ctty = 1 // the terminal is stdout's
		}
		require.NoError(t, cmd.Start())
		tty.Close()
		var logs lockedBuffer
		copied := make(chan struct{})
		go func() { _, _ = io.Copy(&logs, ptmx); close(copied) }()
		stopped(t, cmd, &logs, copied, func(int) {
			_, err := ptmx.Write([]byte{3}) // Ctrl-C
			require.NoError(t, err)
		})
	}
	// Without a terminal, in a process group of its own, as a script or a harness runs it.
	noTerminal := func(t *testing.T, cmd *exec.Cmd, stop func(group, devPid int)) {
		var logs lockedBuffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, cmd.Start())
		stopped(t, cmd, &logs, nil, func(devPid int) { stop(cmd.Process.Pid, devPid) })
	}

	t.Run("Ctrl-C in its terminal", func(t *testing.T) { inTerminal(t, false) })
	t.Run("Ctrl-C in its terminal, stdin elsewhere", func(t *testing.T) { inTerminal(t, true) })
	t.Run("SIGINT to the process group, no terminal", func(t *testing.T) {
		noTerminal(t, makeDev("trap '' INT; exec"), func(group, _ int) {
			require.NoError(t, syscall.Kill(-group, syscall.SIGINT))
		})
	})
	t.Run("SIGINT to dev's pid, no terminal", func(t *testing.T) {
		noTerminal(t, makeDev(""), func(_, devPid int) {
			require.NoError(t, syscall.Kill(devPid, syscall.SIGINT))
		})
	})
}
