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
	"syscall"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/callbacks"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/internal/service"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = ""

const usage = `rendezvous — waits for asynchronous events and resumes workflows exactly once.

Usage:
  rendezvous dev         [flags]   everything in one process: embedded Kafka broker on
                                   127.0.0.1:9092, local PostgreSQL, example definitions
  rendezvous serve       [flags]   run a replica (HTTP API, callbacks, Kafka consumer, executor)
  rendezvous migrate     [flags]   apply database migrations and exit
  rendezvous dev-kafka   [flags]   the embedded Kafka broker alone
  rendezvous healthcheck [flags]   exit 0 when a replica's /healthz answers 200 (for
                                   container images without a shell)
  rendezvous version               print the version

Operate a running service through its HTTP API (--server, env RENDEZVOUS_SERVER):
  rendezvous workflows   apply|list|get         store and read workflow definitions
  rendezvous executions  start|list|get|cancel  start, inspect and cancel executions
  rendezvous waits       list|get|cancel        see what executions wait for; cancel a wait
  rendezvous events      send|unmatched         send an event to an execution by type; see events that reached no wait

Run "rendezvous <command> -h" for the flags of a command.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stderr)
	case "migrate":
		err = migrate(ctx, args[1:], stderr)
	case "dev":
		err = dev(ctx, args[1:], stdout, stderr)
	case "dev-kafka":
		err = devKafka(ctx, args[1:], stdout)
	case "healthcheck":
		err = healthcheck(ctx, args[1:], stdout)
	case "workflows", "executions", "waits", "events":
		return runCLI(ctx, args, os.Stdin, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, buildVersion())
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "rendezvous: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rendezvous %s: %v\n", args[0], err)
		return 1
	}
	return 0
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
	o.String(&c.logLevel, "log-level", "RENDEZVOUS_LOG_LEVEL", "info", "log level: debug, info, warn, error")
	o.String(&c.logFormat, "log-format", "RENDEZVOUS_LOG_FORMAT", "json", "log format: json or text")
}

func (c *common) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: level}
	// Lines logged with a context holding a span carry trace_id and span_id.
	switch c.logFormat {
	case "json":
		return slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, hopts))), nil
	case "text":
		return slog.New(telemetry.LogHandler(slog.NewTextHandler(w, hopts))), nil
	}
	return nil, fmt.Errorf("--log-format: must be json or text, not %q", c.logFormat)
}

// serveOptions binds every serve flag onto a service.Config.
func serveOptions(cfg *service.Config, c *common, noMigrate *bool) *options {
	o := newOptions("serve")
	c.bind(o)
	o.String(&cfg.HTTPAddr, "http-addr", "RENDEZVOUS_HTTP_ADDR", service.HTTPAddrDefault, "listen address of the HTTP API and callbacks")
	o.String(&cfg.InstanceID, "instance-id", "RENDEZVOUS_INSTANCE_ID", "", "name of this replica in claims and logs (default: hostname)")
	o.Strings(&cfg.Callbacks.Secrets, "callback-secret", "RENDEZVOUS_CALLBACK_SECRET", "Standard Webhooks secrets (whsec_…); when set, callbacks must be signed")
	var maxBody int
	o.Int(&maxBody, "callback-max-bytes", "RENDEZVOUS_CALLBACK_MAX_BYTES", callbacks.MaxBodyBytesDefault, "largest accepted callback body")
	o.Bool(noMigrate, "no-migrate", "RENDEZVOUS_NO_MIGRATE", false, "do not apply migrations at start")
	var conns int
	o.Int(&conns, "db-max-conns", "RENDEZVOUS_DB_MAX_CONNS", service.DBMaxConnsDefault, "database pool size of this replica")
	o.Int(&cfg.Executor.Workers, "workers", "RENDEZVOUS_WORKERS", executor.WorkersDefault, "nodes run at once by this replica")
	o.Int(&cfg.Executor.OutboxWorkers, "outbox-workers", "RENDEZVOUS_OUTBOX_WORKERS", executor.OutboxWorkersDefault, "correlated calls sent at once by this replica")
	o.Int(&cfg.Executor.OutboxMaxAttempts, "outbox-max-attempts", "RENDEZVOUS_OUTBOX_MAX_ATTEMPTS", executor.OutboxMaxAttemptsDefault, "sends of a correlated call before it fails")
	o.Duration(&cfg.Executor.Lease, "lease", "RENDEZVOUS_LEASE", executor.LeaseDefault, "how long claimed work is held before another replica may take it")
	o.Duration(&cfg.Executor.PollInterval, "poll-interval", "RENDEZVOUS_POLL_INTERVAL", executor.PollIntervalDefault, "queue poll interval when no notification arrives")
	o.Duration(&cfg.Executor.ShutdownTimeout, "shutdown-timeout", "RENDEZVOUS_SHUTDOWN_TIMEOUT", executor.ShutdownTimeoutDefault, "how long SIGTERM waits for in-flight work")
	o.Duration(&cfg.Executor.Retention, "retention", "RENDEZVOUS_RETENTION", executor.RetentionDefault, "how long finished executions and waits are kept (negative: forever)")
	o.Duration(&cfg.Executor.RetentionInterval, "retention-interval", "RENDEZVOUS_RETENTION_INTERVAL", executor.RetentionIntervalDefault, "how often one replica purges what retention no longer keeps")
	o.Int(&cfg.Aggregator.SweepWorkers, "sweep-workers", "RENDEZVOUS_SWEEP_WORKERS", aggregator.SweepWorkersDefault, "deadline sweeper transactions in flight when many deadlines are due together")
	o.Duration(&cfg.Aggregator.SweepMaxSleep, "sweep-max-sleep", "RENDEZVOUS_SWEEP_MAX_SLEEP", aggregator.SweepMaxSleepDefault, "longest the deadline sweeper sleeps without looking (waits registered by other replicas)")
	o.Int(&cfg.Aggregator.MaxWaitersPerType, "max-waiters-per-type", "RENDEZVOUS_MAX_WAITERS_PER_TYPE", aggregator.MaxWaitersPerTypeDefault, "open waits one payload-match type (Kafka topic and event type) may have; registering one more fails its node")
	o.Duration(&cfg.Aggregator.MaxLookback, "max-lookback", "RENDEZVOUS_MAX_LOOKBACK", aggregator.MaxLookbackDefault, "longest lookback a payload match may ask for: how long a Kafka record that reached no wait is kept for one registering later")
	o.Int(&cfg.Aggregator.UnmatchedRetention, "unmatched-retention", "RENDEZVOUS_UNMATCHED_RETENTION", aggregator.UnmatchedRetentionDefault, "unmatched events kept for GET /api/v1/events/unmatched (the newest)")
	kafkaAfter := bindKafka(o, &cfg.Kafka)
	o.after = func() {
		kafkaAfter()
		cfg.Callbacks.MaxBodyBytes = int64(maxBody)
		cfg.DBMaxConns = int32(conns)
	}
	return o
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg service.Config
	var c common
	var noMigrate bool
	o := serveOptions(&cfg, &c, &noMigrate)
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
	s, err := service.New(ctx, cfg)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

func migrate(ctx context.Context, args []string, stderr io.Writer) error {
	var c common
	o := newOptions("migrate")
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
