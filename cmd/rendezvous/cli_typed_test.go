package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/examples"
)

// runTop runs the binary's top-level dispatch in process, as main does.
func runTop(args ...string) cliResult {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return cliResult{code, stdout.String(), stderr.String()}
}

func TestHoistFlags(t *testing.T) {
	t.Parallel()
	commands := commandNamesKnown()
	for _, tc := range []struct {
		in, want []string
		err      string
	}{
		{in: []string{"waits", "list"}, want: []string{"waits", "list"}},
		{in: []string{"--server", "http://x:1", "executions", "list"}, want: []string{"executions", "list", "--server", "http://x:1"}},
		{in: []string{"--server=http://x:1", "-o", "json", "waits", "get", "id"}, want: []string{"waits", "get", "id", "--server=http://x:1", "-o", "json"}},
		{in: []string{"--no-migrate", "serve", "--workers", "2"}, want: []string{"serve", "--workers", "2", "--no-migrate"}},
		{in: []string{"--version"}, want: []string{"--version"}},
		{in: []string{"--server", "u", "--help"}, want: []string{"--help"}},
		{in: []string{"--server", "u"}, err: "--server u: no command follows"},
		{in: []string{"--", "waits"}, err: `"--" before the command`},
		{in: nil, want: nil},
	} {
		got, err := hoistFlags(tc.in, commands)
		if tc.err != "" {
			require.EqualError(t, err, tc.err, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
	}
}

// TestCLIAsTyped: the command line a newcomer types does what it says.
func TestCLIAsTyped(t *testing.T) {
	t.Parallel()
	f := setupCLI(t)

	// Global flags before the command.
	r := runTop("--server", f.server, "workflows", "list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "no workflows found\n", r.stderr)
	r = runTop("--server="+f.server, "--output", "json", "executions", "list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "[]\n", r.stdout)
	r = runTop("--server", "http://"+freePort(t), "waits", "list")
	require.Equal(t, exitUnavailable, r.code, "the hoisted --server is the one used: %s", r.stderr)
	require.Contains(t, r.stderr, "cannot reach rendezvous at http://127.0.0.1:")

	// apply -f with several files, a glob and a repeated -f.
	dir := t.TempDir()
	for _, name := range []string{"shipment-kafka.json", "expense-approval.json"} {
		raw, err := examples.Definitions.ReadFile(name)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), raw, 0o600))
	}
	out := f.ok(t, "workflows", "apply", "-f", f.file("order-approval.json"), filepath.Join(dir, "shipment-kafka.json"))
	require.Equal(t, []string{"order-approval", "1", "created"}, row(t, out, "order-approval"))
	require.Equal(t, []string{"shipment-kafka", "1", "created"}, row(t, out, "shipment-kafka"))
	out = f.ok(t, "workflows", "apply", "-f", filepath.Join(dir, "*.json"), "-f", f.file("order-approval.json"))
	require.Equal(t, []string{"expense-approval", "1", "created"}, row(t, out, "expense-approval"))
	require.Equal(t, []string{"shipment-kafka", "1", "unchanged"}, row(t, out, "shipment-kafka"))
	require.Equal(t, []string{"order-approval", "1", "unchanged"}, row(t, out, "order-approval"))
	require.Less(t, strings.Index(out, "expense-approval"), strings.Index(out, "shipment-kafka"), "a glob in sorted order")
	r = f.rendezvous(t, "", "workflows", "apply", "-f", filepath.Join(dir, "*.yaml"))
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "*.yaml: no file matches")
	r = f.rendezvous(t, "", "workflows", "apply", f.file("order-approval.json"))
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "name the files with -f: -f "+f.file("order-approval.json"))

	// waits get of an execution that never waited says so.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nowait.json"), []byte(`{"name": "nowait", "nodes": [{"id": "n", "type": "wait", "data": {"for": "0s"}}]}`), 0o600))
	f.ok(t, "workflows", "apply", "-f", filepath.Join(dir, "nowait.json"))
	var started struct{ ID string }
	f.jsonOut(t, &started, "executions", "start", "nowait")
	r = f.rendezvous(t, "", "waits", "get", started.ID)
	require.Equal(t, exitRefused, r.code)
	require.Equal(t, "error: rendezvous waits get: execution "+started.ID+" has no wait (yet)\n", r.stderr)
	r = f.rendezvous(t, "", "waits", "get", "0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f")
	require.Equal(t, exitRefused, r.code)
	require.Contains(t, r.stderr, "error: 404 ")

	// A JSON syntax error is placed by line and column; a misspelled field gets the
	// closest one of the schema.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.json"), []byte("{\n  \"name\": \"broken\",\n  \"nodes\": [\n}\n"), 0o600))
	r = f.rendezvous(t, "", "workflows", "apply", "-f", filepath.Join(dir, "broken.json"))
	require.Equal(t, exitRefused, r.code)
	require.Contains(t, r.stderr, "malformed JSON at line 4, column 1 (offset 35): invalid character '}' looking for beginning of value")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "typo.json"), []byte(`{"name": "typo", "nodes": [{"id": "w", "type": "wait", "data": {"fro": "1m"}}]}`), 0o600))
	r = f.rendezvous(t, "", "workflows", "apply", "-f", filepath.Join(dir, "typo.json"))
	require.Equal(t, exitRefused, r.code)
	require.Contains(t, r.stderr, `nodes[0].data.fro: unknown field; did you mean "for"?`)
}

// TestCommandLineAsTyped: version, help and mistakes of the top-level commands.
func TestCommandLineAsTyped(t *testing.T) {
	t.Parallel()
	v := runTop("version")
	require.Equal(t, 0, v.code)
	require.Equal(t, v, runTop("--version"))

	// A mistyped flag: the error first, with the closest flag, in two lines at most.
	r := runTop("serve", "--kafka-broker", "x:9092")
	require.Equal(t, 1, r.code)
	require.Equal(t, "error: rendezvous serve: unknown flag --kafka-broker; did you mean --kafka-brokers? (run \"rendezvous serve --help\" for its flags)\n", r.stderr)
	r = runTop("serve", "--workers")
	require.Equal(t, "error: rendezvous serve: --workers needs a value (run \"rendezvous serve --help\" for its flags)\n", r.stderr)
	r = runTop("migrate", "extra")
	require.Contains(t, r.stderr, `unexpected argument "extra"`)
	r = runTop("wait", "list")
	require.Equal(t, 2, r.code)
	require.Equal(t, "error: rendezvous: unknown command \"wait\"; did you mean \"waits\"?\nRun \"rendezvous --help\" for the commands.\n", r.stderr)
	r = runTop("waits", "lsit")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `unknown command "lsit"; did you mean "list"?`)
	r = runTop("waits", "list", "--stauts", "waiting")
	require.Equal(t, exitUsage, r.code)
	require.True(t, strings.HasPrefix(r.stderr, "error: rendezvous waits list: unknown flag --stauts; did you mean --status?\n"), r.stderr)

	// Help: grouped by topic, double dashes, value names, examples; nothing of the flag
	// package's raw dump.
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, serveHelp(&stdout, &stderr))
	help := stdout.String()
	require.Empty(t, stderr.String())
	for _, section := range []string{"\nDatabase and logging:\n", "\nHTTP API and callbacks:\n", "\nExecutor:\n", "\nDeadlines and events:\n", "\nKafka:\n", "\nExamples:\n  rendezvous serve "} {
		require.Contains(t, help, section)
	}
	require.Contains(t, help, "\n  --kafka-brokers LIST\n")
	require.Contains(t, help, "\n  --lease DURATION\n")
	require.NotRegexp(t, `(?m)^  -[a-z]`, help, "single-dash flags")
	require.NotContains(t, help, " value\n")
	require.Less(t, strings.Index(help, "Database and logging"), strings.Index(help, "Kafka:"))

	top := runTop("--help")
	require.Equal(t, 0, top.code)
	require.Contains(t, top.stdout, "Run the service:\n")
	require.Contains(t, top.stdout, "Operate a running service through its HTTP API")
	require.Contains(t, top.stdout, "\nExamples:\n")
	for _, g := range cliGroups() {
		require.Regexp(t, `(?m)^  rendezvous `+g.name+` `+regexp.QuoteMeta(g.commandList())+` +`+regexp.QuoteMeta(g.summary)+`$`, top.stdout)
	}
	r = runTop("waits", "get", "--help")
	require.Contains(t, r.stdout, "\n  -o, --output FORMAT\n")
	require.Contains(t, r.stdout, "\n  --server URL\n")
}

// TestDevHelpSaysDevDefaults: dev shares serve's options but not all their defaults,
// and its -h says the ones it runs with.
func TestDevHelpSaysDevDefaults(t *testing.T) {
	t.Parallel()
	defaults := func(cmd string) string {
		r := runTop(cmd, "--help")
		require.Equal(t, 0, r.code, r.stderr)
		return r.stdout
	}
	dev, serve := defaults("dev"), defaults("serve")
	for flag, want := range map[string]string{"log-level": "debug", "log-format": "text", "http-addr": devHTTPAddr, "database-url": localDatabaseURL} {
		require.Regexp(t, `(?m)^  --`+flag+` .*\n.*default `+regexp.QuoteMeta(strconv.Quote(want))+`\)$`, dev, flag)
		require.NotRegexp(t, `(?m)^  --`+flag+` .*\n.*default `+regexp.QuoteMeta(strconv.Quote(want))+`\)$`, serve, flag)
	}
}

func serveHelp(stdout, stderr *bytes.Buffer) int {
	return run([]string{"serve", "--help"}, stdout, stderr)
}

// TestMakeBuildStampsVersion: the binaries make build writes report the version it
// stamps, not "(devel)".
func TestMakeBuildStampsVersion(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	out, err := exec.Command("make", "-C", repoRoot, "--no-print-directory", "build", "BIN="+bin, "VERSION=v0.0.0-make-test").CombinedOutput()
	require.NoError(t, err, string(out))
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(filepath.Join(bin, "rendezvous"), arg).Output()
		require.NoError(t, err)
		require.Equal(t, "v0.0.0-make-test\n", string(out))
	}
}

func TestCommandNames(t *testing.T) {
	t.Parallel()
	want := []string{"dev", "serve", "migrate", "dev-kafka", "dlq", "healthcheck", "version"}
	for _, g := range cliGroups() {
		want = append(want, g.name)
	}
	require.Equal(t, want, commandNames())
}
