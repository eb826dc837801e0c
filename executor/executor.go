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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/clock"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/outbound"
	"github.com/rendezvous-run/rendezvous/vocab"
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
	// HTTPClient sends node and outbox requests. Default a client without a global
	// timeout (each request carries its own).
	HTTPClient *http.Client
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
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}
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
	e.calls, err = outbound.NewSender(pool, outbound.Config{
		InstanceID: cfg.InstanceID, Lease: cfg.Lease, Timeout: cfg.OutboxTimeout, MaxAttempts: cfg.OutboxMaxAttempts,
		BackoffMin: cfg.OutboxBackoffMin, BackoffMax: cfg.OutboxBackoffMax, HTTPClient: cfg.HTTPClient, Logger: cfg.Logger,
		Waits: agg, Executions: e, OnDatabaseError: e.databaseError, Attempted: cfg.TestSignals.OutboxAttempted,
		TracerProvider: cfg.TracerProvider, MeterProvider: cfg.MeterProvider,
	})
	if err != nil {
		return nil, fmt.Errorf("outbound calls: %w", err)
	}
	return e, nil
}

// Aggregator is the aggregator the executor runs on (see New).
func (e *Executor) Aggregator() *aggregator.Aggregator { return e.agg }

// Stored tells when a definition version was stored through this executor (at most one
// pending signal: several stores before it is read are one): the Kafka consumer reads
// the topics of stored definitions again at once instead of at its next periodic
// refresh. One reader, the process's consumer.
func (e *Executor) Stored() <-chan struct{} { return e.stored }

// Registry returns the node parsers, for validating definitions elsewhere.
func (e *Executor) Registry() workflow.Registry { return e.reg }

// ErrNameMismatch is returned when a definition's name differs from the name it is
// stored under.
var ErrNameMismatch = errors.New("definition name does not match")

// StoredWorkflow is the result of PutWorkflow.
type StoredWorkflow struct {
	Name      string    `json:"name"`
	Version   int32     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	// Created is true for the first version of a name.
	Created bool `json:"-"`
	// Unchanged is true when the definition equals the latest version, which is kept.
	Unchanged bool `json:"unchanged"`
}

// PutWorkflow validates raw and stores it as the next version of name. A definition
// equal to the latest version stores nothing and returns that version. Validation
// problems are a *workflow.ValidationError listing all of them.
func (e *Executor) PutWorkflow(ctx context.Context, name string, raw []byte) (StoredWorkflow, error) {
	wf, err := workflow.Compile(raw, e.reg)
	var verr *workflow.ValidationError
	if err != nil && !errors.As(err, &verr) {
		return StoredWorkflow{}, err
	}
	if err == nil {
		if errs := e.checkLimits(wf); len(errs) > 0 {
			verr = &workflow.ValidationError{Errors: errs}
		}
	}
	// The name is checked even when the definition has other errors, so that one answer
	// lists them all.
	var head struct {
		Name *string `json:"name"`
	}
	if json.Unmarshal(raw, &head) == nil && head.Name != nil && *head.Name != name {
		nameErr := workflow.FieldError{Path: "name", Message: fmt.Sprintf("%q does not match the name in the URL %q", *head.Name, name)}
		if verr == nil {
			verr = &workflow.ValidationError{}
		}
		if !slices.ContainsFunc(verr.Errors, func(fe workflow.FieldError) bool { return fe.Path == "name" }) {
			verr.Errors = append([]workflow.FieldError{nameErr}, verr.Errors...)
		}
	}
	if verr != nil {
		return StoredWorkflow{}, verr
	}
	for attempt := 0; ; attempt++ {
		latest, err := e.q.WorkflowGetLatest(ctx, e.pool, name)
		switch {
		case err == nil:
			if sameJSON(latest.Definition, raw) {
				return StoredWorkflow{Name: name, Version: latest.Version, CreatedAt: latest.CreatedAt, Unchanged: true}, nil
			}
		case !errors.Is(db.Interpret(err), db.ErrNotFound):
			return StoredWorkflow{}, fmt.Errorf("load workflow: %w", err)
		}
		var row dbsqlc.Workflow
		err = db.Tx(ctx, e.pool, func(tx pgx.Tx) error {
			var err error
			if row, err = e.q.WorkflowInsert(ctx, tx, dbsqlc.WorkflowInsertParams{Name: name, Definition: raw}); err != nil {
				return err
			}
			return audit.Record(ctx, tx, "workflow/"+name, audit.OutcomeOK, fmt.Sprintf("version %d", row.Version))
		})
		if err != nil {
			// Two concurrent stores of one name pick the same version; the loser retries.
			if errors.Is(db.Interpret(err), db.ErrDuplicate) && attempt < 5 {
				continue
			}
			return StoredWorkflow{}, fmt.Errorf("store workflow: %w", db.Interpret(err))
		}
		e.defsMu.Lock()
		e.defs[defKey{name, row.Version}] = wf
		e.defsMu.Unlock()
		poke(e.stored)
		return StoredWorkflow{Name: name, Version: row.Version, CreatedAt: row.CreatedAt, Created: row.Version == 1}, nil
	}
}

// checkLimits finds what in a valid definition exceeds this service's limits: a payload
// match whose lookback is longer than the aggregator keeps early records
// (--max-lookback). It is checked where definitions are stored, not when they are
// compiled: a definition stored under a larger bound must still run (its lookback is
// then held to the bound).
func (e *Executor) checkLimits(wf *workflow.Workflow) []workflow.FieldError {
	maxLookback := e.agg.MaxLookback()
	var errs []workflow.FieldError
	for i, n := range wf.Nodes() {
		cfg, ok := n.Config.(*workflow.WaitEvents)
		if !ok {
			continue
		}
		for j, ev := range cfg.Events {
			if ev.Lookback > maxLookback {
				errs = append(errs, workflow.FieldError{
					Path:    fmt.Sprintf("nodes[%d].data.events[%d].lookback", i, j),
					Message: fmt.Sprintf("%s exceeds this service's maximum lookback of %s (--max-lookback)", ev.Lookback, maxLookback),
				})
			}
		}
	}
	return errs
}

// sameJSON reports whether two definitions are the same JSON, numbers compared by exact
// value: the stored one has been through jsonb (1e2 comes back as 100), and a definition
// that changes only 9007199254740993 to 9007199254740992 is a new version.
func sameJSON(a, b []byte) bool {
	va, erra := jsonnum.Decode(a)
	vb, errb := jsonnum.Decode(b)
	return erra == nil && errb == nil && jsonnum.DeepEqual(va, vb)
}

// definition returns a compiled definition; versions are immutable, so compiled ones
// are cached for the life of the process.
func (e *Executor) definition(ctx context.Context, q dbsqlc.DBTX, name string, version int32) (*workflow.Workflow, error) {
	k := defKey{name, version}
	e.defsMu.RLock()
	wf := e.defs[k]
	e.defsMu.RUnlock()
	if wf != nil {
		return wf, nil
	}
	row, err := e.q.WorkflowGet(ctx, q, dbsqlc.WorkflowGetParams{Name: name, Version: version})
	if err != nil {
		return nil, fmt.Errorf("load workflow %s v%d: %w", name, version, db.Interpret(err))
	}
	wf, err = workflow.Compile(row.Definition, e.reg)
	if err != nil {
		return nil, fmt.Errorf("compile stored workflow %s v%d: %w", name, version, err)
	}
	e.defsMu.Lock()
	e.defs[k] = wf
	e.defsMu.Unlock()
	return wf, nil
}

// Validated is the answer to a definition that passed validation.
type Validated struct {
	Valid bool `json:"valid"`
	// Nodes counts the definition's nodes.
	Nodes int `json:"nodes"`
}

// ValidateWorkflow checks raw exactly as PutWorkflow does, storing nothing. There is no
// stored name to compare with; the definition's own name is checked like any field.
// Problems are a *workflow.ValidationError.
func (e *Executor) ValidateWorkflow(raw []byte) (Validated, error) {
	wf, err := workflow.Compile(raw, e.reg)
	if err != nil {
		return Validated{}, err
	}
	if errs := e.checkLimits(wf); len(errs) > 0 {
		return Validated{}, &workflow.ValidationError{Errors: errs}
	}
	return Validated{Valid: true, Nodes: len(wf.Nodes())}, nil
}

// ErrExecutionNotFound is returned for an action on an unknown execution id.
var ErrExecutionNotFound = errors.New("execution not found")

// ErrWorkflowNotFound is returned when starting an execution of an unknown workflow.
var ErrWorkflowNotFound = errors.New("workflow not found")

// Started describes a new execution.
type Started struct {
	ID              uuid.UUID             `json:"id"`
	Workflow        string                `json:"workflow"`
	WorkflowVersion int32                 `json:"workflow_version"`
	Status          vocab.ExecutionStatus `json:"status"`
	CreatedAt       time.Time             `json:"created_at"`
}

// StartExecution starts the latest version of a workflow with input (a JSON value;
// empty means {}), in a transaction of its own.
func (e *Executor) StartExecution(ctx context.Context, name string, input json.RawMessage) (Started, error) {
	var st Started
	err := db.Tx(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		st, err = e.StartTx(ctx, tx, db.NewID(), name, input)
		return err
	})
	return st, err
}

// StartTx starts the latest version of a workflow in tx, as execution id, with input (a
// JSON value; empty means {}): the execution, its nodes, and its root nodes waiting or
// queued (insertExecution). The run queue is woken and the start logged once tx
// commits. A Kafka trigger starts its
// execution this way, in the transaction that records the record's dedupe key.
func (e *Executor) StartTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, name string, input json.RawMessage) (Started, error) {
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	latest, err := e.q.WorkflowGetLatest(ctx, tx, name)
	if err != nil {
		if errors.Is(db.Interpret(err), db.ErrNotFound) {
			return Started{}, fmt.Errorf("%w: %s", ErrWorkflowNotFound, name)
		}
		return Started{}, fmt.Errorf("load workflow: %w", err)
	}
	wf, err := e.definition(ctx, tx, name, latest.Version)
	if err != nil {
		return Started{}, err
	}
	exec, err := e.insertExecution(ctx, tx, id, wf, name, latest.Version, input, nil)
	if err != nil {
		return Started{}, err
	}
	// A start through the API has its audit row in this transaction; a trigger's has
	// none (no request, no principal).
	if err := audit.Record(ctx, tx, "execution/"+exec.ID.String(), audit.OutcomeOK, fmt.Sprintf("workflow %s v%d", name, latest.Version)); err != nil {
		return Started{}, err
	}
	db.AfterCommit(tx, func() {
		e.logger.DebugContext(ctx, "execution started", "execution_id", exec.ID, "workflow", name,
			"workflow_version", latest.Version, "instance_id", e.cfg.InstanceID)
	})
	return Started{ID: exec.ID, Workflow: name, WorkflowVersion: latest.Version, Status: exec.Status, CreatedAt: exec.CreatedAt}, nil
}

// insertExecution creates an execution of a definition version in tx; restartedFrom
// links a restart to what it restarts.
//
// A root node whose type runs inline (NodeType.Inline) and waits is run here and its wait
// registered in tx: the execution, its nodes, the wait (and its outbound call's outbox
// row) and the start's audit row are then all the rows a start writes, in the caller's
// one transaction, and a crash before its commit leaves nothing to recover. Every other
// root is queued for the run queue's workers, shown as running. The nodes and the
// execution are inserted in the statuses this leaves them in, not updated after.
func (e *Executor) insertExecution(ctx context.Context, tx pgx.Tx, id uuid.UUID, wf *workflow.Workflow, name string, version int32,
	input json.RawMessage, restartedFrom *uuid.UUID,
) (dbsqlc.Execution, error) {
	st := &execState{
		exec:  dbsqlc.Execution{ID: id, WorkflowName: name, WorkflowVersion: version, Status: execRunning, Input: input},
		wf:    wf,
		nodes: make(map[string]*dbsqlc.NodeExecution, len(wf.Nodes())),
	}
	for _, n := range wf.Nodes() {
		st.nodes[n.ID] = &dbsqlc.NodeExecution{ExecutionID: id, NodeID: n.ID, Status: nodePending}
	}
	inline, queued := e.runInlineRoots(ctx, st)
	defer func() {
		for _, r := range inline {
			r.span.End()
		}
	}()
	if len(queued) == 0 && len(inline) > 0 {
		st.exec.Status = execWaiting
	}
	// The execution, its waits, its nodes and its queued roots are inserted in one round
	// trip: queued in this order (a wait references its execution), sent together. A
	// registration that cannot be queued (a timer, a correlated call) sends what is queued
	// first and runs on its own.
	var p db.Pipeline
	var exec dbsqlc.Execution
	p.Queue(func(d dbsqlc.DBTX) error {
		var err error
		if exec, err = e.q.ExecutionInsert(ctx, d, dbsqlc.ExecutionInsertParams{
			ID: id, WorkflowName: name, WorkflowVersion: version, Status: string(st.exec.Status), Input: input, RestartedFrom: restartedFrom,
		}); err != nil {
			return fmt.Errorf("insert execution: %w", err)
		}
		return nil
	})
	var refused *inlineRoot
	var tooMany *aggregator.TooManyWaitersError
	for i := range inline {
		r := &inline[i]
		reg := *r.out.Wait
		var ws dbsqlc.ExecutionWaitState
		var err error
		if aggregator.Queueable(reg) {
			ws, err = e.agg.QueueRegister(r.ctx, tx, &p, reg, &r.ws)
		} else if err = p.Send(ctx, tx); err == nil {
			r.ws, err = e.agg.Register(r.ctx, tx, reg)
			ws = r.ws
		}
		if errors.As(err, &tooMany) {
			refused = r
			break
		}
		if err != nil {
			return exec, fmt.Errorf("register wait of node %s: %w", r.node, err)
		}
		raw, err := waitingOutput(r.out, ws)
		if err != nil {
			return exec, err
		}
		st.setNode(r.node, nodeWaiting, raw)
	}
	for _, root := range queued {
		st.setNode(root, nodeRunning, nil)
	}
	if refused != nil {
		// Admission control refused a wait: the node fails, and the execution with it, as
		// when a worker registers it. The nodes go in as they stand (those not reached
		// pending), then fail.
		st.setNode(refused.node, nodeRunning, nil)
	}
	nodes := dbsqlc.NodeExecutionInsertParams{ExecutionID: id}
	for _, n := range wf.Nodes() {
		ne := st.nodes[n.ID]
		nodes.NodeIds, nodes.Statuses, nodes.Outputs = append(nodes.NodeIds, n.ID), append(nodes.Statuses, string(ne.Status)), append(nodes.Outputs, string(ne.Output))
	}
	p.Queue(func(d dbsqlc.DBTX) error {
		if err := e.q.NodeExecutionInsert(ctx, d, nodes); err != nil {
			return fmt.Errorf("insert node executions: %w", err)
		}
		return nil
	})
	if len(queued) > 0 && refused == nil {
		arg := dbsqlc.RunQueueInsertManyParams{Kind: string(vocab.KindRun)}
		for _, root := range queued {
			arg.ExecutionIds, arg.NodeIds = append(arg.ExecutionIds, id), append(arg.NodeIds, root)
		}
		p.Queue(func(d dbsqlc.DBTX) error {
			if err := e.q.RunQueueInsertMany(ctx, d, arg); err != nil {
				return fmt.Errorf("enqueue root nodes: %w", err)
			}
			return nil
		})
		db.AfterCommit(tx, e.WakeRunQueue)
	}
	if err := p.Send(ctx, tx); err != nil {
		return exec, err
	}
	st.exec = exec
	if refused != nil {
		return exec, e.failNode(ctx, tx, st, refused.node, tooMany.Error())
	}
	for _, r := range inline {
		// A new execution has nothing buffered yet, but a Kafka record kept for a payload
		// match's lookback may be waiting for this wait: taken now, it may complete it.
		// (A wait it completes is continued by the aggregator after the commit.)
		if _, err := e.agg.TakeKept(ctx, tx, r.ws); err != nil {
			return exec, fmt.Errorf("take early events of node %s: %w", r.node, err)
		}
		e.logWaiting(r.ctx, r.ws)
		if r.out.Wait.APICall {
			db.AfterCommit(tx, e.wakeOutboxQueue)
		}
	}
	return exec, nil
}

// inlineRoot is a root node run in its execution's starting transaction: its outcome
// (waiting), and the wait it registered.
type inlineRoot struct {
	node string
	out  Outcome
	ws   dbsqlc.ExecutionWaitState
	// ctx holds span, the node run's, which ends once its wait is registered.
	ctx  context.Context
	span trace.Span
}

// runInlineRoots runs the roots of a new execution whose type runs inline. Those that
// wait are returned to be registered in the starting transaction; every other root
// (another type, or an inline one that completed or failed at once) is left to the run
// queue, whose worker runs it again and records what it does.
func (e *Executor) runInlineRoots(ctx context.Context, st *execState) (inline []inlineRoot, queued []string) {
	for _, root := range st.wf.Roots() {
		node, _ := st.wf.Node(root)
		typ, ok := e.cfg.NodeTypes[node.Type]
		if !ok || !typ.Inline {
			queued = append(queued, root)
			continue
		}
		runCtx, span := e.startNodeRun(ctx, st.exec.ID, root, 1)
		out, err := typ.Run(runCtx, &RunContext{
			ExecutionID: st.exec.ID, Node: node, Scope: st.scope(), HTTP: e.cfg.HTTPClient, Now: e.cfg.Clock.Now(),
			Logger: e.logger.With("execution_id", st.exec.ID, "node_id", root, "instance_id", e.cfg.InstanceID),
		})
		if err != nil || out.Status != OutcomeWaiting || out.Wait == nil {
			span.SetAttributes(attribute.String("rendezvous.outcome", "queued"))
			span.End()
			queued = append(queued, root)
			continue
		}
		out.Wait.TraceParent = telemetry.TraceParent(runCtx)
		span.SetAttributes(attribute.String("rendezvous.workflow", st.exec.WorkflowName), attribute.String("rendezvous.node_type", node.Type),
			attribute.String("rendezvous.outcome", "waiting"))
		inline = append(inline, inlineRoot{node: root, out: out, ctx: runCtx, span: span})
	}
	return inline, queued
}

// enqueueRun queues a node and shows it as running: from here on it is the run queue's.
func (e *Executor) enqueueRun(ctx context.Context, tx pgx.Tx, execID uuid.UUID, nodeID string) error {
	if _, err := e.q.RunQueueInsert(ctx, tx, dbsqlc.RunQueueInsertParams{ExecutionID: execID, NodeID: nodeID, Kind: string(vocab.KindRun)}); err != nil {
		return fmt.Errorf("enqueue node %s: %w", nodeID, err)
	}
	if err := e.q.NodeExecutionFinish(ctx, tx, dbsqlc.NodeExecutionFinishParams{Status: string(nodeRunning), ExecutionID: execID, NodeID: nodeID}); err != nil {
		return fmt.Errorf("mark node %s running: %w", nodeID, err)
	}
	return nil
}

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
