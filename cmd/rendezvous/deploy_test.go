package main

// The deployment files — Dockerfile, deploy/docker-compose.yml, deploy/k8s — cannot be
// run on the project's machines (no Docker engine, no cluster), so they are checked here
// against the code they deploy: commands exist, every environment variable set is one
// the command reads and its value parses, probe and healthcheck paths are routes the
// service serves, ports and addresses agree, the shutdown budget fits the grace period,
// pools fit PostgreSQL. What the code knows is read from the code: the options of each
// command (its -h output, and serveOptions/healthcheckOptions in process), the routes
// (a real Service), the defaults (exported constants), the example topics (the embedded
// definitions).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/server/auth"
	"github.com/rendezvous-run/rendezvous/workflow/template"
)

const repoRoot = "../.."

// secretEnv are the variables that carry credentials: manifests must take them from a
// Secret, never from a literal or a ConfigMap.
var secretEnv = []string{"DATABASE_URL", "RENDEZVOUS_CALLBACK_SECRET", "RENDEZVOUS_KAFKA_SASL_PASSWORD"}

// listenerConns is what a replica holds besides its pool: the executor's LISTEN
// connection (executor/worker.go, listenOnce) is opened outside it.
const listenerConns = 1

// Connection arithmetic against a PostgreSQL left at its defaults.
const (
	postgresMaxConnectionsDefault = 100
	postgresSuperuserReserved     = 3
)

// ---------------------------------------------------------------------------------
// The binary, its commands and their options.

var release struct {
	once  sync.Once
	dir   string
	bin   string
	build dockerBuild
	err   error
}

// releaseVersion is what the test build stamps through the Dockerfile's -X flag.
const releaseVersion = "v0.0.0-deploy-test"

// releaseBinary builds the command exactly as the Dockerfile's build stage does (its
// environment assignments, its go build arguments, VERSION set), once per test run.
func releaseBinary(t *testing.T) string {
	t.Helper()
	release.once.Do(func() {
		release.build, release.err = dockerfileBuild()
		if release.err != nil {
			return
		}
		if release.dir, release.err = os.MkdirTemp("", "rendezvous-deploy-test-"); release.err != nil {
			return
		}
		release.bin = filepath.Join(release.dir, "rendezvous")
		args := slices.Clone(release.build.args)
		args[release.build.outputIndex] = release.bin
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), release.build.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			release.err = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	})
	require.NoError(t, release.err)
	return release.bin
}

// commandNames are the commands the usage text lists, in its order (its examples after
// them are not a list of commands).
func commandNames() []string {
	var out []string
	list, _, _ := strings.Cut(usageText(), "\nExamples:")
	for _, m := range regexp.MustCompile(`(?m)^  rendezvous (\S+)`).FindAllStringSubmatch(list, -1) {
		out = append(out, m[1])
	}
	return out
}

// helpOption is one option of a command's -h output; Section is the topic it is listed
// under ("" when the command's flags have none).
type helpOption struct{ Flag, Env, Default, Usage, Section string }

// sectionLine is a topic's title in -h: "Kafka:", "Database and logging:".
var sectionLine = regexp.MustCompile(`^[A-Z][A-Za-z ]*:$`)

var helpLine = regexp.MustCompile(`^(.*) \(env ([A-Z0-9_]*), default ("(?:[^"\\]|\\.)*")\)$`)

// commandHelp runs `rendezvous <command> -h` with an empty environment and returns the
// options it lists. options.add writes every option's env and default into its usage
// line, so this reaches the options of every command, including those built inside the
// command's function. It fails unless the command exists and exits 0 on -h.
func commandHelp(t *testing.T, bin, command string) []helpOption {
	t.Helper()
	cmd := exec.Command(bin, command, "-h")
	cmd.Env = []string{}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "rendezvous %s -h must exit 0:\n%s", command, stderr.String())
	var out []helpOption
	var cur *helpOption
	section := ""
	for line := range strings.SplitSeq(stdout.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "  --"):
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "  --"), " ")
			out = append(out, helpOption{Flag: name, Section: section})
			cur = &out[len(out)-1]
		case sectionLine.MatchString(line):
			section = strings.TrimSuffix(line, ":")
			if section == "Flags" {
				section = ""
			}
			cur = nil
		case strings.HasPrefix(line, helpIndent) && cur != nil:
			cur.Usage += strings.TrimPrefix(line, helpIndent)
		default:
			// The usage line, section titles, examples.
			cur = nil
		}
	}
	for i, o := range out {
		m := helpLine.FindStringSubmatch(o.Usage)
		require.NotNil(t, m, "rendezvous %s -h: cannot read env and default of --%s from %q", command, o.Flag, o.Usage)
		def, err := strconv.Unquote(m[3])
		require.NoError(t, err)
		out[i].Usage, out[i].Env, out[i].Default = m[1], m[2], def
	}
	return out
}

// readsEnv is the set of variables the given commands read.
func readsEnv(t *testing.T, bin string, commands ...string) map[string]bool {
	t.Helper()
	env := map[string]bool{}
	for _, c := range commands {
		for _, o := range commandHelp(t, bin, c) {
			if o.Env != "" {
				env[o.Env] = true
			}
		}
	}
	return env
}

// checkEnvRead fails for a variable none of the commands reads. RENDEZVOUS_VAR_* are
// read by templates (definition vars), the standard OTEL_* ones by OpenTelemetry, not
// by options.
func checkEnvRead(t *testing.T, where string, env map[string]string, reads map[string]bool) {
	t.Helper()
	for k := range env {
		if !reads[k] && !strings.HasPrefix(k, template.EnvPrefix) && !slices.Contains(telemetry.EnvVars, k) {
			t.Errorf("%s sets %s, which the command does not read", where, k)
		}
	}
}

// configure applies env, then args, to o — what options.parse does with the process
// environment — so that a container's configuration is evaluated without touching this
// process's environment. Unknown variables are checkEnvRead's business, not its.
func configure(o *options, env map[string]string, args []string) error {
	for _, p := range o.opts {
		if v, ok := env[p.Env]; ok && p.Env != "" {
			if err := p.set(v); err != nil {
				return fmt.Errorf("%s=%q: %w", p.Env, v, err)
			}
		}
	}
	o.fs.SetOutput(io.Discard)
	if err := o.fs.Parse(args); err != nil {
		return err
	}
	if o.after != nil {
		o.after()
	}
	return nil
}

// serveConfig is what `rendezvous serve args…` would run with in env.
func serveConfig(t *testing.T, where string, env map[string]string, args []string) server.Config {
	t.Helper()
	var cfg server.Config
	var c common
	var noMigrate bool
	require.NoError(t, configure(serveOptions(&cfg, &c, &noMigrate), env, args), "%s: serve configuration", where)
	cfg.DatabaseURL, cfg.AutoMigrate = c.databaseURL, !noMigrate
	return cfg
}

// healthcheckTarget is the URL `rendezvous healthcheck args…` would GET in env.
func healthcheckTarget(t *testing.T, where string, env map[string]string, args []string) *url.URL {
	t.Helper()
	var rawURL, addr string
	var timeout time.Duration
	require.NoError(t, configure(healthcheckOptions(&rawURL, &addr, &timeout), env, args), "%s: healthcheck configuration", where)
	target, err := healthcheckURL(rawURL, addr)
	require.NoError(t, err, where)
	u, err := url.Parse(target)
	require.NoError(t, err)
	return u
}

func port(t *testing.T, hostport string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	require.NoError(t, err, hostport)
	n, err := strconv.Atoi(p)
	require.NoError(t, err, hostport)
	return n
}

// ---------------------------------------------------------------------------------
// Routes.

// serviceRoutes starts a real Service (no Kafka) and returns the routes it serves.
func serviceRoutes(t *testing.T) []string {
	t.Helper()
	schema := dbtest.NewSchema(t)
	s, err := server.New(context.Background(), server.Config{
		// Authentication is tested in server; here it would only be in the way.
		Auth:        auth.Config{Insecure: true},
		DatabaseURL: schema.URL, HTTPAddr: "127.0.0.1:0", InstanceID: "deploy-test",
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	defer s.Close()
	routes := s.Routes()
	require.Contains(t, routes, "GET /healthz", "sanity: the route list is the service's")
	return routes
}

// serves reports whether a route ("METHOD /pattern", Echo syntax) answers method and
// path.
func serves(routes []string, method, path string) bool {
	for _, r := range routes {
		m, pattern, _ := strings.Cut(r, " ")
		if m == method && pathMatches(pattern, path) {
			return true
		}
	}
	return false
}

func pathMatches(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	for i, p := range ps {
		if p == "*" {
			return true
		}
		if i >= len(xs) || (strings.HasPrefix(p, ":") && xs[i] == "") || (!strings.HasPrefix(p, ":") && p != xs[i]) {
			return false
		}
	}
	return len(ps) == len(xs)
}

func TestPathMatches(t *testing.T) {
	t.Parallel()
	require.True(t, pathMatches("/healthz", "/healthz"))
	require.False(t, pathMatches("/healthz", "/healthz/x"))
	require.False(t, pathMatches("/readyz", "/healthz"))
	require.True(t, pathMatches("/api/v1/workflows/:name", "/api/v1/workflows/$$name"))
	require.False(t, pathMatches("/api/v1/workflows/:name", "/api/v1/workflows/"))
	require.False(t, pathMatches("/api/v1/workflows/:name", "/api/v1/workflows"))
	require.True(t, pathMatches("/static/*", "/static/a/b"))
}
