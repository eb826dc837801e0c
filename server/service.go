// Package service assembles one rendezvous process: pool, migrations, aggregator,
// executor, HTTP server (API and callbacks), and their orderly shutdown. cmd/rendezvous
// maps flags onto Config; tests start several Services on one database to play
// replicated pods.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/contrib/instrumentation/github.com/labstack/echo/otelecho"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/callbacks"
	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/internal/startstop"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/server/api"
	"github.com/rendezvous-run/rendezvous/server/auth"
	"github.com/rendezvous-run/rendezvous/server/console"
)

// Defaults for Config.
const (
	HTTPAddrDefault     = ":8080"
	DBMaxConnsDefault   = 32
	HTTPShutdownDefault = 10 * time.Second
)

// Config configures a Service.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string. Required.
	DatabaseURL string
	// DBMaxConns is the pool size of this process. Default DBMaxConnsDefault.
	DBMaxConns int32
	// HTTPAddr is where the API and callbacks listen. Default HTTPAddrDefault.
	HTTPAddr string
	// AdminAddr, when set, is where the API, the web view, the OpenAPI document, the
	// schemas and the metrics listen instead; HTTPAddr then serves only the callbacks
	// and the probes. Default empty: everything on HTTPAddr.
	AdminAddr string
	// Auth says who may call which route. With neither a bootstrap token, an OIDC issuer
	// nor a usable admin token in the database, New refuses to start unless
	// Auth.Insecure turns authentication off.
	Auth auth.Config
	// InstanceID names this process in claims, resumed_by and logs. Default: hostname.
	InstanceID string
	// AutoMigrate applies pending migrations at start, under an advisory lock. Default
	// false in the struct; the serve command turns it on unless --no-migrate.
	AutoMigrate bool
	// HTTPShutdown bounds draining in-flight requests. Default HTTPShutdownDefault.
	HTTPShutdown time.Duration
	Callbacks    callbacks.Config
	Executor     executor.Config
	// Aggregator tunes the aggregator and its deadline sweeper (instance id, logger and
	// wake-up hook are set by the service).
	Aggregator aggregator.Config
	// Kafka configures the consumer; without brokers there is none (callbacks only).
	Kafka consumer.Config
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Version names the build in telemetry (service.version).
	Version string
	// Telemetry, when set, is used instead of the service's own (tests read spans and
	// metrics through it); Close and Run do not shut it down then.
	Telemetry *telemetry.Telemetry
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.DBMaxConns <= 0 {
		c.DBMaxConns = DBMaxConnsDefault
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = HTTPAddrDefault
	}
	if c.InstanceID == "" {
		c.InstanceID, _ = os.Hostname()
	}
	if c.HTTPShutdown <= 0 {
		c.HTTPShutdown = HTTPShutdownDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.DatabaseURL == "" {
		return errors.New("database_url: must not be empty (--database-url or DATABASE_URL)")
	}
	if c.InstanceID == "" {
		return errors.New("instance_id: must not be empty")
	}
	return nil
}

// Service is one running rendezvous process.
type Service struct {
	cfg      Config
	logger   *slog.Logger
	pool     *pgxpool.Pool
	echo     *echo.Echo
	listener net.Listener
	// admin and adminListener serve the operator's routes when Config.AdminAddr is set.
	admin         *echo.Echo
	adminListener net.Listener
	// Auth authenticates requests and keeps the API tokens.
	Auth *auth.Authenticator
	Agg  *aggregator.Aggregator
	Exec *executor.Executor
	// Consumer is nil when no Kafka brokers are configured.
	Consumer *consumer.Consumer

	tel      *telemetry.Telemetry
	ownTel   bool
	migrated atomic.Bool
}

// Telemetry is the service's tracer and meter providers.
func (s *Service) Telemetry() *telemetry.Telemetry { return s.tel }

// shutdownTelemetry flushes spans still buffered for export, when the service owns them.
func (s *Service) shutdownTelemetry() {
	if !s.ownTel {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.tel.Shutdown(ctx); err != nil {
		s.logger.Warn("telemetry shutdown", "instance_id", s.cfg.InstanceID, "err", err)
	}
}

// New connects, migrates when asked, and binds the HTTP listener; Run starts the work.
func New(ctx context.Context, cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// Components put instance_id on their own lines; the service adds it to its own.
	logger := cfg.Logger
	pool, err := db.Connect(ctx, cfg.DatabaseURL, cfg.DBMaxConns)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, logger: logger, pool: pool, tel: cfg.Telemetry}
	if s.tel == nil {
		if s.tel, err = telemetry.New(ctx, telemetry.Config{ServiceName: "rendezvous", InstanceID: cfg.InstanceID, Version: cfg.Version}); err != nil {
			pool.Close()
			return nil, err
		}
		s.ownTel = true
	}
	if err := s.init(ctx); err != nil {
		s.closeListeners()
		s.shutdownTelemetry()
		pool.Close()
		return nil, err
	}
	return s, nil
}

func (s *Service) init(ctx context.Context) error {
	cfg := s.cfg
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("database unreachable: %w", err)
	}
	if cfg.AutoMigrate {
		if err := db.Migrate(ctx, s.pool, s.logger.With("instance_id", cfg.InstanceID)); err != nil {
			return err
		}
	}
	// The executor is built with its aggregator (each needs the other: see executor.New),
	// then the sources of events on that aggregator. The consumer starts the executions
	// of triggers through the executor, and reads the topics of a definition stored
	// through this replica at once.
	acfg := cfg.Aggregator
	acfg.InstanceID, acfg.Logger = cfg.InstanceID, s.logger
	acfg.TracerProvider, acfg.MeterProvider = s.tel.TracerProvider, s.tel.MeterProvider
	if err := s.listen(); err != nil {
		return err
	}
	ecfg := cfg.Executor
	ecfg.InstanceID = cfg.InstanceID
	ecfg.Outbound.Self = []string{s.Addr(), s.AdminAddr()}
	ecfg.Logger = s.logger
	ecfg.TracerProvider, ecfg.MeterProvider = s.tel.TracerProvider, s.tel.MeterProvider
	ex, err := executor.New(s.pool, acfg, ecfg)
	if err != nil {
		return err
	}
	agg := ex.Aggregator()
	var cons *consumer.Consumer
	if len(cfg.Kafka.Brokers) > 0 {
		kcfg := cfg.Kafka
		kcfg.ClientID = cfg.InstanceID
		kcfg.Logger = s.logger
		kcfg.TracerProvider, kcfg.MeterProvider, kcfg.Propagator = s.tel.TracerProvider, s.tel.MeterProvider, s.tel.Propagator
		kcfg.Starter, kcfg.Definitions = ex, ex
		if cons, err = consumer.New(s.pool, agg, kcfg); err != nil {
			return err
		}
	}
	ccfg := cfg.Callbacks
	ccfg.Logger = s.logger.With("instance_id", cfg.InstanceID) // callbacks do not add it themselves
	cb, err := callbacks.New(agg, ccfg)
	if err != nil {
		return err
	}
	authCfg := cfg.Auth
	authCfg.MeterProvider = s.tel.MeterProvider
	authn, err := auth.New(ctx, s.pool, authCfg)
	if err != nil {
		return err
	}
	if authCfg.Insecure {
		s.logger.WarnContext(ctx, "authentication is OFF (insecure mode): anyone who reaches the HTTP port may store definitions, start and cancel executions and read every payload",
			"instance_id", cfg.InstanceID)
	} else if ok, err := authn.HasCredentials(ctx); err != nil {
		return fmt.Errorf("look for API tokens: %w", err)
	} else if !ok {
		return errors.New("auth: no way to authenticate: set RENDEZVOUS_BOOTSTRAP_TOKEN (an admin token; openssl rand -hex 32 makes one) or an OIDC issuer, or pass --insecure-no-auth to run without authentication")
	}
	s.Auth = authn

	e := s.newEcho(authn)
	admin := e
	if cfg.AdminAddr != "" {
		admin = s.newEcho(authn)
	}
	api.Register(admin, ex, agg, api.Access{Auth: authn, Pool: s.pool}, s.logger.With("instance_id", cfg.InstanceID))
	api.RegisterSchemas(admin)
	console.Register(admin)
	admin.GET("/metrics", echo.WrapHandler(s.tel.MetricsHandler()))
	cb.Register(e)
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", s.ready)
	s.Agg, s.Exec, s.Consumer, s.echo = agg, ex, cons, e
	if admin != e {
		s.admin = admin
	}
	if err := checkRouteAccess(s.Routes()); err != nil {
		return err
	}
	return nil
}

// listen binds the listeners, first of all: the egress policy refuses the addresses
// they are bound to, so the executor is built knowing them.
func (s *Service) listen() (err error) {
	if s.listener, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.HTTPAddr, err)
	}
	if s.cfg.AdminAddr != "" {
		if s.adminListener, err = net.Listen("tcp", s.cfg.AdminAddr); err != nil {
			_ = s.listener.Close()
			s.listener = nil
			return fmt.Errorf("listen on %s: %w", s.cfg.AdminAddr, err)
		}
	}
	return nil
}

// closeListeners releases the listeners of a service that failed to start.
func (s *Service) closeListeners() {
	if s.listener != nil {
		_ = s.listener.Close()
	}
	if s.adminListener != nil {
		_ = s.adminListener.Close()
	}
}

// newEcho returns a server with the service's error format, tracing, access control and
// audit log; the routes are added by the caller.
func (s *Service) newEcho(authn *auth.Authenticator) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = problem.ErrorHandler(s.logger.With("instance_id", s.cfg.InstanceID))
	// The audit log records the peer's address, not a header any client can write; a
	// deployment behind a proxy sees the proxy's.
	e.IPExtractor = echo.ExtractIPDirect()
	// A server span per request (the API and callbacks), continuing the caller's trace;
	// probes, scrapes and the web view's static files would only be noise.
	e.Use(handledOnce)
	e.Use(otelecho.Middleware("rendezvous",
		otelecho.WithTracerProvider(s.tel.TracerProvider), otelecho.WithPropagators(s.tel.Propagator),
		otelecho.WithSkipper(func(c echo.Context) bool {
			switch c.Path() {
			case "/healthz", "/readyz", "/metrics", "/ui", "/ui/*", "/schemas/:name", "/openapi.json":
				return true
			}
			return false
		})))
	e.Use(s.retryLater)
	e.Use(authn.Middleware(lookupAccess))
	e.Use(s.auditChanges)
	return e
}

func (s *Service) ready(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	body := map[string]any{"status": "ready", "database": "ok", "migrations": "ok"}
	code := http.StatusOK
	if err := s.pool.Ping(ctx); err != nil {
		body["database"], body["status"], code = err.Error(), "unready", http.StatusServiceUnavailable
		body["migrations"] = "unknown: database unreachable"
	} else if err := s.migrationsCurrent(ctx); err != nil {
		body["migrations"], body["status"], code = err.Error(), "unready", http.StatusServiceUnavailable
	}
	if s.Consumer != nil {
		body["kafka"] = "ok"
		if err := s.Consumer.Ready(ctx); err != nil {
			body["kafka"], body["status"], code = err.Error(), "unready", http.StatusServiceUnavailable
		}
		// A stalled partition leaves the pod ready (another replica would meet the same
		// record or the same missing dead-letter topic) but is named here, for whoever
		// looks, beside rendezvous_kafka_partition_stalled.
		if stalled := s.Consumer.Stalled(); len(stalled) > 0 {
			body["kafka_stalled_partitions"] = stalled
		}
	}
	// A host whose circuit is open leaves the pod ready too (every replica calls the same
	// host), named here beside rendezvous_outbound_circuit_state.
	if open := s.Exec.Circuits(); len(open) > 0 {
		body["outbound_circuits"] = open
	}
	return c.JSON(code, body)
}

// handledOnce stops an error from reaching the error handler twice: the OTel middleware
// hands a handler's error to Echo's error handler itself (so its span sees the final
// status) and then returns it as well. Once the response is committed, the error has
// been handled.
func handledOnce(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		if err != nil && c.Response().Committed {
			return nil
		}
		return err
	}
}

// migrationsCurrent fails while the database lacks migrations this binary has (a replica
// started with --no-migrate before `rendezvous migrate` ran). A database ahead of the
// binary is fine: during a rolling upgrade old replicas run on the new schema. Once
// current, it stays so for the life of the process and is not checked again.
func (s *Service) migrationsCurrent(ctx context.Context) error {
	if s.migrated.Load() {
		return nil
	}
	current, target, err := db.MigrationVersions(ctx, s.pool)
	if err != nil {
		return fmt.Errorf("cannot read the migration version: %w", err)
	}
	if current < target {
		return fmt.Errorf("pending: the database is at version %d, this build needs %d (run rendezvous migrate)", current, target)
	}
	s.migrated.Store(true)
	return nil
}

// Addr is the address the HTTP server listens on.
func (s *Service) Addr() string { return s.listener.Addr().String() }

// AdminAddr is the address the operator's routes listen on: Addr unless
// Config.AdminAddr is set.
func (s *Service) AdminAddr() string {
	if s.adminListener == nil {
		return s.Addr()
	}
	return s.adminListener.Addr().String()
}

// Pool is the service's database pool.
func (s *Service) Pool() *pgxpool.Pool { return s.pool }

// Routes lists the HTTP routes served, as "METHOD /path" (Echo's :param syntax), sorted.
// Deployment manifests are checked against it, so a probe or scrape path cannot name a
// route that does not exist.
func (s *Service) Routes() []string {
	var out []string
	for _, r := range s.echo.Routes() {
		out = append(out, r.Method+" "+r.Path)
	}
	if s.admin != nil {
		for _, r := range s.admin.Routes() {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	slices.Sort(out)
	return out
}

// Run serves until ctx ends. Shutdown goes in dependency order: stop accepting HTTP
// (in-flight callbacks finish), then let the executor finish or hand back its work,
// then close the pool. It returns nil after a clean shutdown.
func (s *Service) Run(ctx context.Context) error {
	s.logger.InfoContext(ctx, "rendezvous serving", "http_addr", s.Addr(), "admin_addr", s.AdminAddr(), "instance_id", s.cfg.InstanceID)
	// Every background loop, started here and stopped below: the intake first, so that
	// the batch in hand is applied and committed while the executor still runs.
	var intake []startstop.Service
	if s.Consumer != nil {
		intake = append(intake, s.Consumer.Service())
	}
	work := slices.Concat(s.Exec.Services(), s.Agg.Services())
	// The loops outlive ctx: they stop in order once the HTTP servers have drained.
	loopCtx := context.WithoutCancel(ctx)
	if err := startstop.StartAll(loopCtx, slices.Concat(work, intake)...); err != nil {
		return err
	}
	srv := &http.Server{Handler: s.echo, ReadHeaderTimeout: 10 * time.Second}
	httpErr := make(chan error, 2)
	var adminSrv *http.Server
	if s.admin != nil {
		adminSrv = &http.Server{Handler: s.admin, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := adminSrv.Serve(s.adminListener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				httpErr <- err
			}
		}()
	}
	go func() {
		if err := srv.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			httpErr <- err
		}
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-httpErr:
		runErr = fmt.Errorf("http server: %w", err)
	}
	s.logger.Info(LogShuttingDown, "instance_id", s.cfg.InstanceID)
	began := time.Now()
	s.shutdownStage("http", nil, func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), s.cfg.HTTPShutdown)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		if adminSrv != nil {
			_ = adminSrv.Shutdown(shutdownCtx)
		}
	})
	// The intake finishes and commits the batch in hand, then leaves the group.
	s.shutdownStage("intake", intake, nil)
	s.shutdownStage("work", work, nil)
	s.shutdownStage("database pool", nil, s.pool.Close) // waits for every connection handed out
	s.shutdownStage("telemetry", nil, s.shutdownTelemetry)
	s.logger.Info(LogStopped, "instance_id", s.cfg.InstanceID, "duration", time.Since(began))
	return runErr
}

// The messages of the lines a replica logs as it shuts down: "shutting down" once,
// LogShutdownStage for each stage that ends, with its "stage", "duration" and "loops",
// and LogStopped, with the whole "duration". The chaos run reads them back to tell what
// held a SIGTERM exit.
const (
	LogShuttingDown  = "shutting down"
	LogShutdownStage = "shutdown stage done"
	LogStopped       = "stopped"
)

// shutdownStage runs one stage of shutdown — the loops to stop together, or a function —
// and logs how long it took, and each loop's time, so that a replica killed at the end of
// its grace period has said which stage held it.
func (s *Service) shutdownStage(name string, loops []startstop.Service, fn func()) {
	if fn == nil && len(loops) == 0 {
		return // no Kafka intake: nothing to say
	}
	start := time.Now()
	var stopped []startstop.Stopped
	if fn != nil {
		fn()
	} else {
		stopped = startstop.StopAll(loops...)
	}
	attrs := []any{"instance_id", s.cfg.InstanceID, "stage", name, "duration", time.Since(start)}
	if len(stopped) > 0 {
		each := make([]any, 0, 2*len(stopped))
		for _, st := range stopped {
			each = append(each, st.Name, st.Took)
		}
		attrs = append(attrs, slog.Group("loops", each...))
	}
	s.logger.Info(LogShutdownStage, attrs...)
}

// Close releases resources of a Service that was never Run.
func (s *Service) Close() {
	if s.Consumer != nil {
		s.Consumer.Client().Close()
	}
	if s.listener != nil {
		_ = s.listener.Close()
	}
	if s.adminListener != nil {
		_ = s.adminListener.Close()
	}
	s.pool.Close()
	s.shutdownTelemetry()
}
