// Package executor runs workflow definitions: it stores and compiles them, starts
// executions, and works the durable run queue — running nodes, recording their outcomes,
// and advancing each execution's graph when a node completes or a wait resumes. It runs
// the loop of package outbound's sender of correlated calls, and fails the node of a
// required call given up.
//
// It never sees where an event came from: a satisfied wait reaches it either inside the
// aggregator's transaction that completed it (a batch of events; the executor is the
// aggregator's Continuer), or as a "resume" row in the run queue, written by the
// aggregator.
//
// Each node run is a span; a wait the node registers stores that span's traceparent, so
// the wait's outbound call (which hands the trace on in its request), the aggregator's
// event and deadline spans and the continuation form one trace, on whichever replica
// each happens.
package executor

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/clock"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/outbound"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// Defaults for Config.
const (
	WorkersDefault           = 16
	OutboxWorkersDefault     = 16
	LeaseDefault             = 2 * time.Minute
	PollIntervalDefault      = time.Second
	NodeMaxAttemptsDefault   = 3
	OutboxMaxAttemptsDefault = 8
	OutboxBackoffMinDefault  = 500 * time.Millisecond
	OutboxBackoffMaxDefault  = 30 * time.Second
	OutboxTimeoutDefault     = 10 * time.Second
	ShutdownTimeoutDefault   = 20 * time.Second
)

// Config configures an Executor.
type Config struct {
	// InstanceID names this process: it claims work and resumes waits under this name.
	// Required.
	InstanceID string
	// Workers is how many nodes run at once in this process. Default WorkersDefault.
	Workers int
	// OutboxWorkers is how many correlated calls are sent at once. Default
	// OutboxWorkersDefault.
	OutboxWorkers int
	// Lease is how long claimed work stays invisible to other pods; work of a pod that
	// dies becomes claimable again after it. It must exceed the longest node run (http
	// nodes are capped at 60 s). Default LeaseDefault.
	Lease time.Duration
	// PollInterval is how often the queues are polled when no notification arrives.
	// Default PollIntervalDefault.
	PollInterval time.Duration
	// NodeMaxAttempts bounds attempts of a node whose run errors (a network error of an
	// http node); the last failure fails the node. Default NodeMaxAttemptsDefault.
	NodeMaxAttempts int
	// OutboxMaxAttempts bounds sends of a correlated call. Default
	// OutboxMaxAttemptsDefault.
	OutboxMaxAttempts int
	// OutboxBackoffMin and OutboxBackoffMax bound the exponential backoff between sends
	// of a call, and between attempts of a node whose run errored. Defaults
	// OutboxBackoffMinDefault and OutboxBackoffMaxDefault.
	OutboxBackoffMin time.Duration
	OutboxBackoffMax time.Duration
	// OutboxTimeout is the timeout of one send. Default OutboxTimeoutDefault.
	OutboxTimeout time.Duration
	// ShutdownTimeout is how long Run waits for in-flight work after its context ends.
	// Default ShutdownTimeoutDefault.
	ShutdownTimeout time.Duration
	// NodeTypes is the registry of node types. Default BuiltinNodeTypes().
	NodeTypes map[string]NodeType
	// Outbound configures the client of http nodes and correlated calls: the egress
	// policy, secrets, the circuit breakers (each request carries its own timeout). Its
	// MeterProvider defaults to the executor's.
	Outbound outbound.ClientConfig
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// TestSignals: steps tests wait for; inert in production.
	TestSignals TestSignals
	// Clock is the time retention's cut-off, a wait node's moment to resume and the
	// default bound of a bulk redrive are taken from; the aggregator's too when its
	// config names none. Default clock.Real.
	Clock clock.Clock
	// Retention is how long finished executions and finished waits are kept; negative
	// keeps them forever. Default RetentionDefault.
	Retention time.Duration
	// RetentionInterval is how often one pod purges. Default RetentionIntervalDefault.
	RetentionInterval time.Duration
	// RetentionBatch bounds the rows one purge transaction deletes. Default
	// RetentionBatchDefault.
	RetentionBatch int
	// TracerProvider receives the spans of node runs, correlated calls and
	// continuations; each wait's spans join the trace of the node run that registered
	// it. Default a no-op provider.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the executor's metrics (outbound calls, wait durations, the
	// run queue, database errors). Default a no-op provider.
	MeterProvider metric.MeterProvider
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(d *int, v int) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt(&c.Workers, WorkersDefault)
	defInt(&c.OutboxWorkers, OutboxWorkersDefault)
	defInt(&c.NodeMaxAttempts, NodeMaxAttemptsDefault)
	defInt(&c.OutboxMaxAttempts, OutboxMaxAttemptsDefault)
	def(&c.Lease, LeaseDefault)
	def(&c.PollInterval, PollIntervalDefault)
	def(&c.OutboxBackoffMin, OutboxBackoffMinDefault)
	def(&c.OutboxBackoffMax, OutboxBackoffMaxDefault)
	def(&c.OutboxTimeout, OutboxTimeoutDefault)
	def(&c.ShutdownTimeout, ShutdownTimeoutDefault)
	if c.Retention == 0 {
		c.Retention = RetentionDefault
	}
	def(&c.RetentionInterval, RetentionIntervalDefault)
	defInt(&c.RetentionBatch, RetentionBatchDefault)
	if c.NodeTypes == nil {
		c.NodeTypes = BuiltinNodeTypes()
	}
	if c.Outbound.MeterProvider == nil {
		c.Outbound.MeterProvider = c.MeterProvider
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Clock = clock.Or(c.Clock)
	return c
}

func (c Config) validate() error {
	if c.InstanceID == "" {
		return errors.New("executor.instance_id: must not be empty")
	}
	if c.Lease <= workflow.MaxHTTPTimeout+5*time.Second {
		return fmt.Errorf("executor.lease: must exceed the longest http node run (%s)", workflow.MaxHTTPTimeout)
	}
	if c.OutboxTimeout >= c.Lease {
		return errors.New("executor.outbox_timeout: must be shorter than executor.lease")
	}
	return nil
}

// Executor runs workflows.
type Executor struct {
	cfg    Config
	pool   *pgxpool.Pool
	q      *dbsqlc.Queries
	agg    *aggregator.Aggregator
	logger *slog.Logger
	reg    workflow.Registry

	defsMu sync.RWMutex
	defs   map[defKey]*workflow.Workflow

	wakeRun    chan struct{}
	wakeOutbox chan struct{}
	// notifyRun and notifyOutbox ask the notifier to tell other replicas.
	notifyRun    chan struct{}
	notifyOutbox chan struct{}

	// stored is poked when a definition version is stored here (Stored).
	stored chan struct{}

	ins        instruments
	depthCache telemetry.Cached[map[string]int64]
	// calls sends the correlated calls of waits.
	calls *outbound.Sender
	// client sends every outbound request, the http nodes' and the calls'.
	client *outbound.Client

	// continueStart, set by tests, runs as each continuation run in the deciding
	// transaction starts: before the waits are written, when the continuation is made
	// ahead of their write.
	continueStart func()
	// continueFault, set by tests, fails continuations run in the deciding transaction.
	continueFault func() error
	// continueWriteFault, set by tests, adds to the writes of those continuations one
	// the server refuses.
	continueWriteFault bool
}

type defKey struct {
	name    string
	version int32
}

// New returns an Executor and the aggregator it runs on, built from aggCfg with the
// executor as its Continuer (aggCfg.InstanceID, Logger and Clock default to the
// executor's).
// The two need each other — the executor registers and cancels waits through the
// aggregator, the aggregator hands it the executions whose waits a batch of events
// completes — so they are built together, once: neither is changed after New returns.
// Aggregator returns the aggregator, for the sources of events.
func New(pool *pgxpool.Pool, aggCfg aggregator.Config, cfg Config) (*Executor, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	reg := workflow.Registry{}
	for name, t := range cfg.NodeTypes {
		reg[name] = t.Parse
	}
	e := &Executor{
		cfg: cfg, pool: pool, q: dbsqlc.New(), logger: cfg.Logger, reg: reg,
		defs:         map[defKey]*workflow.Workflow{},
		wakeRun:      make(chan struct{}, 1),
		wakeOutbox:   make(chan struct{}, 1),
		notifyRun:    make(chan struct{}, 1),
		notifyOutbox: make(chan struct{}, 1),
		stored:       make(chan struct{}, 1),
	}
	if err := e.initTelemetry(); err != nil {
		return nil, fmt.Errorf("executor telemetry: %w", err)
	}
	if aggCfg.InstanceID == "" {
		aggCfg.InstanceID = cfg.InstanceID
	}
	if aggCfg.Logger == nil {
		aggCfg.Logger = cfg.Logger
	}
	if aggCfg.Clock == nil {
		aggCfg.Clock = cfg.Clock
	}
	aggCfg.Continuer = e
	agg, err := aggregator.New(pool, aggCfg)
	if err != nil {
		return nil, err
	}
	e.agg = agg
	if e.client, err = outbound.NewClient(cfg.Outbound); err != nil {
		return nil, fmt.Errorf("executor.outbound: %w", err)
	}
	e.calls, err = outbound.NewSender(pool, outbound.Config{
		InstanceID: cfg.InstanceID, Lease: cfg.Lease, Timeout: cfg.OutboxTimeout, MaxAttempts: cfg.OutboxMaxAttempts,
		BackoffMin: cfg.OutboxBackoffMin, BackoffMax: cfg.OutboxBackoffMax, Client: e.client, Logger: cfg.Logger,
		Waits: agg, Executions: e, OnDatabaseError: e.databaseError, Attempted: cfg.TestSignals.OutboxAttempted,
		TracerProvider: cfg.TracerProvider, MeterProvider: cfg.MeterProvider,
	})
	if err != nil {
		return nil, fmt.Errorf("outbound calls: %w", err)
	}
	return e, nil
}

// Circuits are the destination hosts whose circuit is open or half-open in this replica,
// with that state: /readyz's detail.
func (e *Executor) Circuits() map[string]outbound.CircuitState { return e.client.Circuits() }

// Aggregator is the aggregator the executor runs on (see New).
func (e *Executor) Aggregator() *aggregator.Aggregator { return e.agg }

// Stored tells when a definition version was stored through this executor (at most one
// pending signal: several stores before it is read are one): the Kafka consumer reads
// the topics of stored definitions again at once instead of at its next periodic
// refresh. One reader, the process's consumer.
func (e *Executor) Stored() <-chan struct{} { return e.stored }

// Registry returns the node parsers, for validating definitions elsewhere.
func (e *Executor) Registry() workflow.Registry { return e.reg }

// ErrExecutionNotFound is returned for an action on an unknown execution id.
var ErrExecutionNotFound = errors.New("execution not found")

// ErrWorkflowNotFound is returned when starting an execution of an unknown workflow.
var ErrWorkflowNotFound = errors.New("workflow not found")

// WakeRunQueue announces committed run-queue work: this replica's loop wakes at once,
// and the others through a NOTIFY sent outside the committing transaction.
func (e *Executor) WakeRunQueue() {
	poke(e.wakeRun)
	poke(e.notifyRun)
}

// wakeOutbox announces committed outbox rows, likewise.
func (e *Executor) wakeOutboxQueue() {
	poke(e.wakeOutbox)
	poke(e.notifyOutbox)
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
