// Command rendezvous is the event-aggregation worker: `serve` runs a replica, `migrate`
// applies the database migrations, `healthcheck` probes a replica from inside its
// container, `version` prints the build.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/callbacks"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/internal/gctune"
	"github.com/rendezvous-run/rendezvous/internal/suggest"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/outbound"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/server/auth"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = ""

// serviceCommands run or support a replica; the operator commands (cliGroups) are listed
// after them in the usage text, from their own definitions.
const serviceCommands = `Run the service:
  rendezvous dev         [flags]   everything in one process: embedded Kafka broker on
                                   127.0.0.1:9092, local PostgreSQL, example definitions
  rendezvous serve       [flags]   run a replica (HTTP API, callbacks, Kafka consumer, executor)
  rendezvous migrate     [flags]   apply database migrations and exit
  rendezvous dev-kafka   [flags]   the embedded Kafka broker alone
  rendezvous dlq replay  [flags]   re-produce a dead-letter topic's records to their source topic
  rendezvous healthcheck [flags]   exit 0 when a replica's /healthz answers 200 (for
                                   container images without a shell)
  rendezvous version               print the version (also --version)
`

const usageExamples = `Examples:
  rendezvous dev --database-url 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
  rendezvous workflows apply -f 'examples/*.json'
  rendezvous --server http://127.0.0.1:8080 waits list
  rendezvous serve --help
`

// usageText is the top-level help: the commands by topic, examples, where to look next.
func usageText() string {
	var b strings.Builder
	b.WriteString("rendezvous — waits for asynchronous events and resumes workflows exactly once.\n\n")
	b.WriteString("Usage: rendezvous [--server URL] <command> [flags]\n\n")
	b.WriteString(serviceCommands)
	b.WriteString("\nOperate a running service through its HTTP API (--server URL, env RENDEZVOUS_SERVER;\nthese flags may stand before or after the command):\n")
	groups := cliGroups()
	width := 0
	for _, g := range groups {
		width = max(width, len(g.name)+1+len(g.commandList()))
	}
	for _, g := range groups {
		fmt.Fprintf(&b, "  rendezvous %-*s  %s\n", width, g.name+" "+g.commandList(), g.summary)
	}
	b.WriteString("\n" + usageExamples)
	b.WriteString("\nRun \"rendezvous <command> --help\" for the flags and examples of a command.\n")
	return b.String()
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// serviceCommand is a command that runs or supports a replica (not an API client).
type serviceCommand func(ctx context.Context, args []string, stdout, stderr io.Writer) error

func serviceCommandTable() map[string]serviceCommand {
	return map[string]serviceCommand{
		"serve":   serve,
		"migrate": migrate,
		"dev":     dev,
		"dev-kafka": func(ctx context.Context, args []string, stdout, _ io.Writer) error {
			return devKafka(ctx, args, stdout)
		},
		"healthcheck": func(ctx context.Context, args []string, stdout, _ io.Writer) error {
			return healthcheck(ctx, args, stdout)
		},
		"dlq": func(ctx context.Context, args []string, stdout, _ io.Writer) error {
			return dlq(ctx, args, stdout)
		},
	}
}

// commandNamesKnown is every top-level command name, for hoisting and suggestions.
func commandNamesKnown() []string {
	names := []string{"version", "help"}
	for name := range serviceCommandTable() {
		names = append(names, name)
	}
	for _, g := range cliGroups() {
		names = append(names, g.name)
	}
	slices.Sort(names)
	return names
}

func run(args []string, stdout, stderr io.Writer) int {
	args, err := hoistFlags(args, commandNamesKnown())
	if err != nil {
		fmt.Fprintf(stderr, "error: rendezvous: %v\nRun \"rendezvous --help\" for the commands.\n", err)
		return 2
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, buildVersion())
		return 0
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, usageText())
		return 0
	}
	for _, g := range cliGroups() {
		if g.name == args[0] {
			return runCLI(ctx, args, os.Stdin, stdout, stderr)
		}
	}
	cmd, ok := serviceCommandTable()[args[0]]
	if !ok {
		msg := fmt.Sprintf("unknown command %q", args[0])
		if strings.HasPrefix(args[0], "-") {
			msg = fmt.Sprintf("unknown flag %q before the command", args[0])
		} else if s := suggest.Closest(args[0], commandNamesKnown()); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		fmt.Fprintf(stderr, "error: rendezvous: %s\nRun \"rendezvous --help\" for the commands.\n", msg)
		return 2
	}
	err = cmd(ctx, args[1:], stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: rendezvous %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// hoistFlags moves flags written before the command after it, so that
// `rendezvous --server URL waits list` means `rendezvous waits list --server URL`: each
// command's own parser then reads them, and a flag the command does not take is
// reported by it. A leading flag takes the next word as its value unless it is written
// --flag=value, or the next word is a flag or a command (a switch: --no-migrate serve).
// Help and version requests stay where they are.
func hoistFlags(args, commands []string) ([]string, error) {
	var hoisted []string
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") && len(args[i]) > 1 {
		switch args[i] {
		case "-h", "--help", "-help", "--version", "-version":
			if len(hoisted) == 0 {
				return args, nil
			}
			// rendezvous --server URL --help: the help of the commands.
			return args[i:], nil
		case "--", "-":
			return nil, fmt.Errorf("%q before the command", args[i])
		}
		hoisted = append(hoisted, args[i])
		if !strings.Contains(args[i], "=") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && !slices.Contains(commands, args[i+1]) {
			hoisted = append(hoisted, args[i+1])
			i++
		}
		i++
	}
	if len(hoisted) == 0 {
		return args, nil
	}
	if i == len(args) {
		return nil, fmt.Errorf("%s: no command follows", strings.Join(hoisted, " "))
	}
	out := append([]string{args[i]}, args[i+1:]...)
	return append(out, hoisted...), nil
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if rev != "" {
			return "dev-" + rev[:min(12, len(rev))] + dirty
		}
		return bi.Main.Version
	}
	return "unknown"
}

// common holds the options every command shares.
type common struct {
	databaseURL string
	logLevel    string
	logFormat   string
}

func (c *common) bind(o *options) {
	o.String(&c.databaseURL, "database-url", "DATABASE_URL", "", "PostgreSQL connection string")
	o.String(&c.logLevel, "log-level", "RENDEZVOUS_LOG_LEVEL", strings.ToLower(telemetry.DefaultLogLevel.String()), "log level: debug, info, warn, error")
	o.String(&c.logFormat, "log-format", "RENDEZVOUS_LOG_FORMAT", telemetry.DefaultLogFormat, "log format: json or text")
}

func (c *common) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	l, err := telemetry.NewLogger(w, level, c.logFormat)
	if err != nil {
		return nil, fmt.Errorf("--log-format: %w", err)
	}
	return l, nil
}

// serveOptions binds every serve flag onto a server.Config.
func serveOptions(cfg *server.Config, c *common, noMigrate *bool) *options {
	o := newOptions("serve")
	o.summary = `Runs one replica: the HTTP API and callbacks, the Kafka consumer (with --kafka-brokers),
the executor and the deadline sweeper. Run as many as you like against one database.`
	o.examples = []string{
		"rendezvous serve --database-url 'postgres://rendezvous@db:5432/rendezvous' --kafka-brokers kafka:9092",
		"DATABASE_URL='postgres://…' RENDEZVOUS_HTTP_ADDR=:8081 rendezvous serve --log-format text",
	}
	o.inSection("Database and logging")
	c.bind(o)
	o.Bool(noMigrate, "no-migrate", "RENDEZVOUS_NO_MIGRATE", false, "do not apply migrations at start")
	var conns int
	o.Int(&conns, "db-max-conns", "RENDEZVOUS_DB_MAX_CONNS", server.DBMaxConnsDefault, "database pool size of this replica")
	o.inSection("HTTP API and callbacks")
	o.String(&cfg.HTTPAddr, "http-addr", "RENDEZVOUS_HTTP_ADDR", server.HTTPAddrDefault, "listen address of the HTTP API and callbacks")
	o.String(&cfg.AdminAddr, "admin-addr", "RENDEZVOUS_ADMIN_ADDR", "", "when set, the API, web view, OpenAPI document, schemas and metrics listen here and --http-addr serves only callbacks and probes")
	o.String(&cfg.Auth.BootstrapToken, "bootstrap-token", "RENDEZVOUS_BOOTSTRAP_TOKEN", "", "admin bearer token that needs no database row, to create the others (prefer the variable: flags show in process lists)")
	o.Bool(&cfg.Auth.Insecure, "insecure-no-auth", "RENDEZVOUS_INSECURE_NO_AUTH", false, "serve every route without authentication (logged at WARN on every start)")
	o.Duration(&cfg.Auth.CacheTTL, "auth-cache-ttl", "RENDEZVOUS_AUTH_CACHE_TTL", auth.CacheTTLDefault, "how long a replica trusts what it read of a token: the bound on a revocation reaching it (at most 10s)")
	o.String(&cfg.Auth.OIDC.Issuer, "oidc-issuer", "RENDEZVOUS_OIDC_ISSUER", "", "accept JWT bearer tokens of this OIDC issuer")
	o.String(&cfg.Auth.OIDC.Audience, "oidc-audience", "RENDEZVOUS_OIDC_AUDIENCE", "", "audience (client id) the JWTs must carry")
	o.String(&cfg.Auth.OIDC.JWKSURL, "oidc-jwks-url", "RENDEZVOUS_OIDC_JWKS_URL", "", "the issuer's keys (default: from its discovery document)")
	o.String(&cfg.Auth.OIDC.RoleClaim, "oidc-role-claim", "RENDEZVOUS_OIDC_ROLE_CLAIM", auth.RoleClaimDefault, "JWT claim holding the roles (admin, operator, viewer, sender)")
	o.String(&cfg.InstanceID, "instance-id", "RENDEZVOUS_INSTANCE_ID", "", "name of this replica in claims and logs (default: hostname)")
	o.Strings(&cfg.Callbacks.Secrets, "callback-secret", "RENDEZVOUS_CALLBACK_SECRET", "Standard Webhooks secrets (whsec_…); when set, callbacks must be signed")
	var maxBody int
	o.Int(&maxBody, "callback-max-bytes", "RENDEZVOUS_CALLBACK_MAX_BYTES", callbacks.MaxBodyBytesDefault, "largest accepted callback body")
	o.Int(&cfg.Callbacks.RatePerSource, "callback-rate-per-source", "RENDEZVOUS_CALLBACK_RATE_PER_SOURCE", callbacks.RatePerSourceDefault, "callbacks a second one source address may send, beyond its burst (then 429 with Retry-After; negative: no limit)")
	o.Int(&cfg.Callbacks.BurstPerSource, "callback-burst-per-source", "RENDEZVOUS_CALLBACK_BURST_PER_SOURCE", callbacks.BurstPerSourceDefault, "callbacks one source address may send at once")
	o.Int(&cfg.Callbacks.RatePerExecution, "callback-rate-per-execution", "RENDEZVOUS_CALLBACK_RATE_PER_EXECUTION", callbacks.RatePerExecutionDefault, "callbacks a second for one execution, from any source, beyond its burst (negative: no limit)")
	o.Int(&cfg.Callbacks.BurstPerExecution, "callback-burst-per-execution", "RENDEZVOUS_CALLBACK_BURST_PER_EXECUTION", callbacks.BurstPerExecutionDefault, "callbacks for one execution at once")
	o.Strings(&cfg.Callbacks.TrustedProxies, "trusted-proxies", "RENDEZVOUS_TRUSTED_PROXIES", "addresses and CIDRs of proxies whose X-Forwarded-For names a callback's source for its rate limit")
	o.inSection("Executor")
	o.Int(&cfg.Executor.Workers, "workers", "RENDEZVOUS_WORKERS", executor.WorkersDefault, "nodes run at once by this replica")
	o.Int(&cfg.Executor.OutboxWorkers, "outbox-workers", "RENDEZVOUS_OUTBOX_WORKERS", executor.OutboxWorkersDefault, "correlated calls sent at once by this replica")
	o.Int(&cfg.Executor.OutboxMaxAttempts, "outbox-max-attempts", "RENDEZVOUS_OUTBOX_MAX_ATTEMPTS", executor.OutboxMaxAttemptsDefault, "sends of a correlated call before it fails")
	o.Duration(&cfg.Executor.Lease, "lease", "RENDEZVOUS_LEASE", executor.LeaseDefault, "how long claimed work is held before another replica may take it")
	o.Duration(&cfg.Executor.PollInterval, "poll-interval", "RENDEZVOUS_POLL_INTERVAL", executor.PollIntervalDefault, "queue poll interval when no notification arrives")
	o.Duration(&cfg.Executor.ShutdownTimeout, "shutdown-timeout", "RENDEZVOUS_SHUTDOWN_TIMEOUT", executor.ShutdownTimeoutDefault, "how long SIGTERM waits for in-flight work")
	o.Duration(&cfg.Executor.Retention, "retention", "RENDEZVOUS_RETENTION", executor.RetentionDefault, "how long finished executions and waits are kept (negative: forever)")
	o.Duration(&cfg.Executor.RetentionInterval, "retention-interval", "RENDEZVOUS_RETENTION_INTERVAL", executor.RetentionIntervalDefault, "how often one replica purges what retention no longer keeps")
	o.inSection("Outbound requests")
	o.Strings(&cfg.Executor.Outbound.Allow, "outbound-allow", "RENDEZVOUS_OUTBOUND_ALLOW", "destinations outbound requests may reach besides public addresses: CIDRs, addresses, host names, *.domain, each with an optional :port (loopback and private ranges are refused otherwise; link-local and cloud metadata always)")
	o.Int(&cfg.Executor.Outbound.Breaker.Failures, "breaker-failures", "RENDEZVOUS_BREAKER_FAILURES", outbound.BreakerFailuresDefault, "consecutive failures (network errors, 5xx, 429) that open a destination host's circuit in this replica (negative: no circuit breakers)")
	o.Duration(&cfg.Executor.Outbound.Breaker.OpenFor, "breaker-open-for", "RENDEZVOUS_BREAKER_OPEN_FOR", outbound.BreakerOpenForDefault, "how long an open circuit sends nothing to its host before probing it")
	o.Int(&cfg.Executor.Outbound.Breaker.Probes, "breaker-probes", "RENDEZVOUS_BREAKER_PROBES", outbound.BreakerProbesDefault, "requests a half-open circuit lets through; all must succeed to close it")
	o.String(&cfg.Executor.Outbound.SecretsDir, "secrets-dir", "RENDEZVOUS_SECRETS_DIR", "", "directory of secrets for @{secrets.NAME}, one file per name (a mounted Kubernetes secret); RENDEZVOUS_SECRET_NAME variables are read first")
	o.inSection("Deadlines and events")
	o.Int(&cfg.Aggregator.SweepWorkers, "sweep-workers", "RENDEZVOUS_SWEEP_WORKERS", aggregator.SweepWorkersDefault, "deadline sweeper transactions in flight when many deadlines are due together")
	o.Duration(&cfg.Aggregator.SweepMaxSleep, "sweep-max-sleep", "RENDEZVOUS_SWEEP_MAX_SLEEP", aggregator.SweepMaxSleepDefault, "longest the deadline sweeper sleeps without looking (waits registered by other replicas)")
	o.Int(&cfg.Aggregator.MaxWaitersPerType, "max-waiters-per-type", "RENDEZVOUS_MAX_WAITERS_PER_TYPE", aggregator.MaxWaitersPerTypeDefault, "open waits one payload-match type (Kafka topic and event type) may have; registering one more fails its node")
	o.Duration(&cfg.Aggregator.MaxLookback, "max-lookback", "RENDEZVOUS_MAX_LOOKBACK", aggregator.MaxLookbackDefault, "longest lookback a payload match may ask for: how long a Kafka record that reached no wait is kept for one registering later")
	o.Duration(&cfg.Aggregator.StaleWaitAfter, "stale-wait-after", "RENDEZVOUS_STALE_WAIT_AFTER", aggregator.StaleWaitAfterDefault, "age at which an open event wait with no event yet counts as stale (rendezvous_wait_states_stale)")
	o.Duration(&cfg.Aggregator.HeartbeatInterval, "heartbeat-interval", "RENDEZVOUS_HEARTBEAT_INTERVAL", aggregator.HeartbeatIntervalDefault, "how often this replica writes its heartbeat (rendezvous_replica_heartbeat_age_seconds)")
	o.Int(&cfg.Aggregator.UnmatchedRetention, "unmatched-retention", "RENDEZVOUS_UNMATCHED_RETENTION", aggregator.UnmatchedRetentionDefault, "unmatched events kept for GET /api/v1/events/unmatched (the newest)")
	o.inSection("Kafka")
	kafkaAfter := bindKafka(o, &cfg.Kafka)
	o.after = func() {
		kafkaAfter()
		cfg.Callbacks.MaxBodyBytes = int64(maxBody)
		cfg.DBMaxConns = int32(conns)
	}
	return o
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg server.Config
	var c common
	var noMigrate bool
	o := serveOptions(&cfg, &c, &noMigrate)
	o.help = stdout
	if err := o.parse(args); err != nil {
		return err
	}
	logger, err := c.logger(stderr)
	if err != nil {
		return err
	}
	cfg.DatabaseURL = c.databaseURL
	cfg.AutoMigrate = !noMigrate
	cfg.Logger = logger
	cfg.Version = buildVersion()
	logger.Info("garbage collector", gctune.Apply().LogAttrs()...)
	s, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	o := newOptions("migrate")
	o.summary = "Applies the database migrations and exits; serve applies them at start unless --no-migrate."
	o.examples = []string{"rendezvous migrate --database-url 'postgres://rendezvous@db:5432/rendezvous'"}
	o.help = stdout
	c.bind(o)
	if err := o.parse(args); err != nil {
		return err
	}
	logger, err := c.logger(stderr)
	if err != nil {
		return err
	}
	if c.databaseURL == "" {
		return errors.New("--database-url (or DATABASE_URL) is required")
	}
	pool, err := db.Connect(ctx, c.databaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	return db.Migrate(ctx, pool, logger)
}
