package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rendezvous-run/rendezvous/harness/pgproxy"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Run carries out a whole run — setup, the plan, quiescence, the checks, teardown — and
// returns its report. An error means the run could not be carried out (no database, no
// binary, a replica that never became ready); broken promises are violations in the
// report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	out := cfg.Out
	fmt.Fprintf(out, "chaos: seed %d\nchaos: replay with: %s\n", cfg.Seed, ReplayCommand(cfg))
	plan := NewPlan(cfg)
	began := time.Now()

	dir := cfg.WorkDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "rendezvous-chaos-*"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// A directory the caller named is theirs: it is never removed.
	keepDir := cfg.Keep || cfg.WorkDir != ""
	defer func() {
		if keepDir {
			fmt.Fprintf(out, "chaos: logs and work files kept in %s\n", dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	}()

	bin := cfg.Binary
	if bin == "" {
		t := time.Now()
		var err error
		if bin, err = buildBinary(ctx, dir); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "chaos: built %s in %s\n", bin, time.Since(t).Round(100*time.Millisecond))
	}

	cl := &cluster{cfg: cfg, dir: dir, bin: bin, out: out, adminURL: cfg.DatabaseURL,
		dbName: fmt.Sprintf("%s%d_%d", dbPrefix, cfg.Seed, os.Getpid()),
		group:  fmt.Sprintf("chaos-%d-%d", cfg.Seed, os.Getpid())}
	var err error
	if cl.dbURL, err = withDatabase(cfg.DatabaseURL, cl.dbName); err != nil {
		return nil, err
	}
	if err := cl.createDatabase(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if cfg.Keep {
			fmt.Fprintf(out, "chaos: database %s kept\n", cl.dbName)
			return
		}
		if err := cl.dropDatabase(); err != nil {
			fmt.Fprintf(out, "chaos: %v\n", err)
		}
	}()
	defer cl.close()
	if err := cl.migrate(ctx); err != nil {
		return nil, err
	}
	cl.replicaURL = cl.dbURL
	if cfg.PGRestart == PGRestartProxy {
		target, err := pgproxy.HostPort(cl.dbURL)
		if err != nil {
			return nil, err
		}
		if cl.proxy, err = pgproxy.New(target); err != nil {
			return nil, err
		}
		cl.replicaURL = pgproxy.ProxiedURL(cl.dbURL, cl.proxy.Addr())
	}
	if err := cl.startKafka(ctx); err != nil {
		return nil, err
	}

	pcfg, err := pgxpool.ParseConfig(cl.dbURL)
	if err != nil {
		return nil, fmt.Errorf("database_url: %w", err)
	}
	// The driver's own reads are few; the replicas get the server's connections.
	pcfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the run's database: %w", err)
	}
	defer pool.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cl.kafkaAddr), kgo.ProducerLinger(0))
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	defer prod.Close()

	runCtx, cancel := context.WithTimeout(ctx, cfg.MaxDuration-time.Since(began))
	defer cancel()
	r := &runner{cfg: cfg, plan: plan, cl: cl, pool: pool, prod: prod, ctx: runCtx,
		http: &http.Client{Timeout: 30 * time.Second, Transport: withToken{http.DefaultTransport}}, down: make([]bool, cfg.Replicas)}
	defer r.http.CloseIdleConnections()
	for i := range plan.Executions {
		p := &plan.Executions[i]
		e := &execRun{plan: p, def: &plan.Definitions[p.Def], discovered: make(chan struct{}), called: make(chan struct{})}
		e.log.Index = i
		for _, ep := range p.Events {
			e.log.Events = append(e.log.Events, EventLog{Name: ep.Name, Mode: ep.Mode})
		}
		r.execs = append(r.execs, e)
	}
	if r.fk, err = startFake(r.failFirst, r.onCall); err != nil {
		return nil, err
	}
	defer r.fk.close()
	cl.fakeURL = r.fk.URL()

	if err := r.startReplicas(runCtx); err != nil {
		keepDir = true
		return nil, err
	}
	fmt.Fprintf(out, "chaos: %d replicas ready, %d definitions stored, consumer group stable after %s; starting %d executions over %s\n",
		cfg.Replicas, len(plan.Definitions), time.Since(began).Round(100*time.Millisecond), len(plan.Executions), plan.Spread.Round(time.Second))

	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() { defer close(watched); r.watchGroup(stopWatch, 500*time.Millisecond) }()
	r.drive()
	fmt.Fprintf(out, "chaos: everything sent after %s; waiting for the service to quiesce\n", time.Since(r.t0).Round(time.Second))
	quiet := r.quiesce()
	end := time.Now()
	close(stopWatch)
	<-watched

	obs, err := collect(context.WithoutCancel(ctx), pool, r.fk, cl)
	if err != nil {
		keepDir = true
		return nil, err
	}
	runLog := r.runLog(began, end)
	report := Verify(cfg, plan, runLog, obs)
	if quiet != nil {
		report.add(Violation{Invariant: InvDrained, Execution: -1, Detail: quiet.Error()})
	}
	if runCtx.Err() != nil && ctx.Err() == nil {
		report.add(Violation{Invariant: InvInstructions, Execution: -1, Detail: fmt.Sprintf("the run exceeded max duration %s", cfg.MaxDuration)})
	}
	if !report.OK() {
		keepDir = true
	}
	if keepDir {
		// What the driver did, to read next to the replicas' logs.
		if raw, err := json.MarshalIndent(runLog, "", "  "); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "runlog.json"), raw, 0o644)
		}
	}
	return report, nil
}

// startReplicas starts every replica, stores the definitions, and waits until the
// consumer group has settled with every partition assigned.
func (r *runner) startReplicas(ctx context.Context) error {
	cl := r.cl
	for i := range r.cfg.Replicas {
		port, err := freePort()
		if err != nil {
			return err
		}
		log, err := cl.logFile(replicaLogName(i))
		if err != nil {
			return err
		}
		rep := &replica{index: i, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), log: log}
		cl.replicas = append(cl.replicas, rep)
		if err := cl.startReplica(rep); err != nil {
			return err
		}
		r.lifetimes = append(r.lifetimes, Lifetime{Sender: rep.sender(), Start: time.Now()})
	}
	for _, rep := range cl.replicas {
		if err := cl.waitReady(ctx, rep, 90*time.Second); err != nil {
			return fmt.Errorf("%w (logs in %s)", err, cl.dir)
		}
	}
	for _, d := range r.plan.Definitions {
		if err := r.putDefinition(ctx, &d); err != nil {
			return err
		}
	}
	if err := r.putTriggerDefinition(ctx); err != nil {
		return err
	}
	if err := r.createOperatorToken(ctx); err != nil {
		return err
	}
	return cl.waitGroupStable(ctx, r.cfg.Replicas, consumedTopics, 90*time.Second)
}

func (r *runner) putDefinition(ctx context.Context, d *Definition) error {
	raw, err := d.JSON(r.cl.fakeURL)
	if err != nil {
		return err
	}
	return r.putWorkflow(ctx, 0, d.Name, raw)
}

// putWorkflow stores the workflow definition raw under name through replica i's API.
func (r *runner) putWorkflow(ctx context.Context, i int, name string, raw []byte) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+r.cl.replicas[i].addr+"/api/v1/workflows/"+name, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return fmt.Errorf("store definition %s: %w", name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("store definition %s: %d %s", name, resp.StatusCode, body)
	}
	return nil
}

// runLog snapshots what the driver did.
func (r *runner) runLog(start, end time.Time) RunLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	lg := RunLog{Start: start, End: end, Faults: append([]FaultLog(nil), r.faults...),
		Dead: append([]DeadMember(nil), r.dead...), Lifetimes: append([]Lifetime(nil), r.lifetimes...),
		Notes: append([]string(nil), r.notes...), Group: append([]GroupSample(nil), r.group...), FinalGroup: r.lastGroup,
		Evicted: append([]Eviction(nil), r.evicted...), Triggers: append([]TriggerLog(nil), r.triggers...)}
	for _, e := range r.execs {
		e.mu.Lock()
		x := e.log
		x.Events = append([]EventLog(nil), e.log.Events...)
		if e.log.Redrive != nil {
			rl := *e.log.Redrive
			x.Redrive = &rl
		}
		e.mu.Unlock()
		lg.Execs = append(lg.Execs, x)
	}
	for i := range lg.Faults {
		// Plan offsets are relative to the run's start; keep them so in the report.
		lg.Faults[i].At = lg.Faults[i].Start.Sub(r.t0)
	}
	return lg
}
