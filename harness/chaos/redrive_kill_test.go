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
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// killFake is the external service of TestRedriveSurvivesSIGKILL: its correlated call
// is down (503) until it is brought back, and it holds every continuation call for a
// while before answering, so that a replica can be killed while it waits for the answer.
// It records every request, keyed as the service sends them.
type killFake struct {
	srv  *http.Server
	ln   net.Listener
	hold time.Duration

	mu   sync.Mutex
	down bool
	// calls counts the correlated calls answered 200, by correlation id (the call's
	// Idempotency-Key); failed counts those answered 503.
	calls  map[string]int
	failed int
	// conts holds every continuation call: its Idempotency-Key, who sent it and when.
	conts []Continuation
	// inFlight counts the continuation calls being held, by sender.
	inFlight map[string]int
}

func startKillFake(t *testing.T, hold time.Duration) *killFake {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &killFake{ln: ln, hold: hold, down: true, calls: map[string]int{}, inFlight: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /calls", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		f.mu.Lock()
		down := f.down
		if down {
			f.failed++
		} else {
			f.calls[r.Header.Get("Idempotency-Key")]++
		}
		f.mu.Unlock()
		if down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("POST /continuations", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ExecutionID string `json:"execution_id"`
			Kind        string `json:"kind"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		id, _ := uuid.Parse(body.ExecutionID)
		sender := r.Header.Get("X-Chaos-Sender")
		f.mu.Lock()
		f.conts = append(f.conts, Continuation{Kind: body.Kind, ExecutionID: id, IdempotencyKey: r.Header.Get("Idempotency-Key"), Sender: sender, At: time.Now()})
		f.inFlight[sender]++
		f.mu.Unlock()
		select {
		case <-time.After(f.hold):
		case <-r.Context().Done():
		}
		f.mu.Lock()
		f.inFlight[sender]--
		f.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.srv.Shutdown(ctx)
	})
	return f
}

// startKillCluster starts what the SIGKILL tests share: a database of their own, named
// after name, the embedded broker, and two `rendezvous serve` replicas built from this
// module, calling the fake service at fakeURL, with extraArgs after their own flags. Their
// logs are kept when the test fails. It returns the runner that drives them (without a
// producer) and a pool on the database; everything stops when the test ends.
func startKillCluster(ctx context.Context, t *testing.T, name, fakeURL string, extraArgs ...string) (*runner, *pgxpool.Pool) {
	dir, err := os.MkdirTemp("", "rendezvous-"+strings.ReplaceAll(name, "_", "-")+"-*")
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replica logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	bin, err := buildBinary(ctx, dir)
	require.NoError(t, err)
	cfg := Config{Seed: 1, Replicas: 2, DatabaseURL: dbtest.ServerURL(t)}.WithDefaults()
	cl := &cluster{cfg: cfg, dir: dir, bin: bin, out: t.Output(), adminURL: cfg.DatabaseURL,
		dbName:  fmt.Sprintf("%s%s_%d", dbPrefix, name, os.Getpid()),
		group:   fmt.Sprintf("%s-%d", strings.ReplaceAll(name, "_", "-"), os.Getpid()),
		fakeURL: fakeURL, extraArgs: extraArgs}
	cl.dbURL, err = withDatabase(cfg.DatabaseURL, cl.dbName)
	require.NoError(t, err)
	require.NoError(t, cl.createDatabase(ctx))
	t.Cleanup(func() { require.NoError(t, cl.dropDatabase()) })
	require.NoError(t, cl.migrate(ctx))
	cl.replicaURL = cl.dbURL
	t.Cleanup(cl.close)
	require.NoError(t, cl.startKafka(ctx))
	for i := range cfg.Replicas {
		port, err := freePort()
		require.NoError(t, err)
		log, err := cl.logFile(replicaLogName(i))
		require.NoError(t, err)
		rep := &replica{index: i, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), log: log}
		cl.replicas = append(cl.replicas, rep)
		require.NoError(t, cl.startReplica(rep))
	}
	for _, rep := range cl.replicas {
		require.NoError(t, cl.waitReady(ctx, rep, 90*time.Second), "logs in %s", dir)
	}
	pool, err := pgxpool.New(ctx, cl.dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client := &http.Client{Timeout: 30 * time.Second, Transport: withToken{http.DefaultTransport}}
	t.Cleanup(client.CloseIdleConnections)
	return &runner{cl: cl, http: client, ctx: ctx, down: make([]bool, cfg.Replicas)}, pool
}

// startExecution starts an execution of workflow with input through replica i's API and
// returns its id.
func startExecution(t *testing.T, r *runner, i int, workflow string, input map[string]any) uuid.UUID {
	body, _ := json.Marshal(map[string]any{"input": input})
	resp, err := r.http.Post("http://"+r.cl.replicas[i].addr+"/api/v1/workflows/"+workflow+"/executions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", raw)
	var started struct {
		ID uuid.UUID `json:"id"`
	}
	require.NoError(t, json.Unmarshal(raw, &started))
	return started.ID
}

func (f *killFake) url() string { return "http://" + f.ln.Addr().String() }

func (f *killFake) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

// busySender returns a sender with a continuation call held right now, "" if none.
func (f *killFake) busySender() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s, n := range f.inFlight {
		if n > 0 {
			return s
		}
	}
	return ""
}

// TestRedriveSurvivesSIGKILL redrives failed executions through real `rendezvous serve`
// processes while one of them is SIGKILLed in the middle of the redrives, and again
// while continuations of redriven executions are in flight, and counts in the database
// and at the external service that every execution was redriven once, recorded its
// event once and continued once.
//
// The executions fail as in production when the external service is down: their
// correlated call is answered 503 past its last retry, which fails the wait and the
// execution. Once the service is back an operator (an operator token) redrives each over
// HTTP — a third of them twice at once, on both replicas — and the first replica is
// killed while its redrive transactions are in flight. Each redrive reopens the wait and
// sends its call again (a call the killed replica had claimed is sent by the other once
// the claim's lease has passed); the service answers it and calls back. Each wait then completes
// and its continuation, an http node, calls the service, which holds the call: the
// replica sending one is killed before the answer, so that node's result is never
// committed and the other replica runs it again once the lease expires (the same
// Idempotency-Key, at-least-once, as documented).
//
// It does not run in parallel: its replicas, its build and its waits for leases beside
// TestChaosShort on a small machine slow that run's Kafka deliveries past the latency
// bound its model assumes. Go runs it first, then the package's parallel tests.
func TestRedriveSurvivesSIGKILL(t *testing.T) {
	const executions = 30
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	fk := startKillFake(t, 2*time.Second)
	// Two sends of a correlated call, half a second apart: the service down for a second
	// fails the wait. No circuit breaker: one would hold the calls back while the service
	// is down instead of spending their attempts, and this test needs them to fail.
	r, pool := startKillCluster(ctx, t, "redrive_kill", fk.url(), "--outbox-max-attempts", "2", "--breaker-failures", "-1")
	cl := r.cl

	// The wait outlasts a lease: a call claimed by a replica that is killed is sent by
	// another once the claim's lease has passed, and must still find its wait open.
	def := Definition{Name: "redrive-kill", Strategy: "all", OnTimeout: "fail", Timeout: replicaLease + 2*time.Minute,
		Events: []EventDef{{Name: EventAPI, Required: true}}}
	require.NoError(t, r.putDefinition(ctx, &def))
	require.NoError(t, r.createOperatorToken(ctx))

	// The service is down: every execution fails when its call has failed twice.
	ids := make([]uuid.UUID, executions)
	for i := range ids {
		ids[i] = startExecution(t, r, i%2, def.Name, map[string]any{"chaos_plan": i})
	}
	require.Eventually(t, func() bool {
		var failed int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM executions e JOIN execution_wait_states w ON w.execution_id = e.id
			WHERE e.id = ANY($1) AND e.status = 'failed' AND w.status = 'failed'`, ids).Scan(&failed)
		return err == nil && failed == executions
	}, time.Minute, 200*time.Millisecond, "every execution fails with its call")
	before := map[uuid.UUID]int64{}
	rows, err := pool.Query(ctx, `SELECT execution_id, version FROM execution_wait_states WHERE execution_id = ANY($1)`, ids)
	require.NoError(t, err)
	for rows.Next() {
		var id uuid.UUID
		var v int64
		require.NoError(t, rows.Scan(&id, &v))
		before[id] = v
	}
	require.NoError(t, rows.Err())
	fk.mu.Lock()
	require.GreaterOrEqual(t, fk.failed, 2*executions, "each call sent twice, answered 503")
	fk.mu.Unlock()

	// The service is back. Redrive every execution at once, a third of them twice at
	// once (on both replicas). The first ten are locked by the test, so the redrives of
	// them wait inside the replicas' transactions; replica 0 is SIGKILLed while they
	// wait, then the lock is released: its requests are cut off mid-redrive, and the
	// operator's retries go to replica 1.
	fk.setDown(false)
	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, `SELECT 1 FROM executions WHERE id = ANY($1) FOR UPDATE`, ids[:10])
	require.NoError(t, err)
	var mu sync.Mutex
	attempts := map[uuid.UUID][]Attempt{}
	var requests sync.WaitGroup
	for i, id := range ids {
		sends := 1
		if i%3 == 0 {
			sends = 2
		}
		for s := range sends {
			requests.Go(func() {
				atts := r.redrivePost(s, (i+s)%2, "/api/v1/executions/"+id.String()+"/redrive")
				mu.Lock()
				attempts[id] = append(attempts[id], atts...)
				mu.Unlock()
			})
		}
	}
	require.Eventually(t, func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'`, cl.dbName).Scan(&waiting)
		return err == nil && waiting >= 8
	}, 30*time.Second, 20*time.Millisecond, "redrives waiting for the locked executions")
	killedAt := time.Now()
	kill(r, 0)
	require.NoError(t, lock.Rollback(ctx))
	requests.Wait()
	require.NoError(t, restartReplica(ctx, r, 0))

	// Each redriven wait sent its call again; the service calls back once it has it,
	// through either replica. The sender of a continuation is killed while the service
	// holds its call.
	var callbacks sync.WaitGroup
	errs := make(chan error, executions)
	for i, id := range ids {
		callbacks.Go(func() {
			var corr uuid.UUID
			for deadline := time.Now().Add(replicaLease + time.Minute); ; time.Sleep(100 * time.Millisecond) {
				err := pool.QueryRow(ctx, `SELECT correlation_id FROM execution_wait_states WHERE execution_id = $1`, id).Scan(&corr)
				fk.mu.Lock()
				called := fk.calls[corr.String()] > 0
				fk.mu.Unlock()
				if err == nil && called {
					break
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					errs <- fmt.Errorf("execution %s: its call was never sent again", id)
					return
				}
			}
			body, _ := json.Marshal(map[string]any{"execution_id": id.String(), "correlation_id": corr.String(), "decision": "approved"})
			atts := r.post(0, i%2, "/api/internal/callbacks/chaos", body, http.Header{"Content-Type": {"application/json"}})
			// 202, or 200 when an earlier request whose answer was cut off recorded it.
			if last := atts[len(atts)-1].Status; last != http.StatusAccepted && last != http.StatusOK {
				errs <- fmt.Errorf("execution %s: callback into the reopened wait answered %d", id, last)
			}
		})
	}
	var busy string
	require.Eventually(t, func() bool { busy = fk.busySender(); return busy != "" }, time.Minute, 10*time.Millisecond, "a continuation in flight")
	victim := slices.IndexFunc(cl.replicas, func(rep *replica) bool { rep.mu.Lock(); defer rep.mu.Unlock(); return rep.sender() == busy })
	require.GreaterOrEqual(t, victim, 0, "sender %s", busy)
	kill(r, victim)
	// Every call the victim made came before this; a repeat of one comes after.
	contKilledAt := time.Now()
	callbacks.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.NoError(t, restartReplica(ctx, r, victim))

	// Every execution completes; work the killed replica held is taken over after its
	// lease.
	require.Eventually(t, func() bool {
		var open int
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM executions WHERE id = ANY($1) AND status <> 'completed')
			+ (SELECT count(*) FROM run_queue) + (SELECT count(*) FROM outbox)`, ids).Scan(&open)
		return err == nil && open == 0
	}, replicaLease+90*time.Second, 500*time.Millisecond, "every redriven execution completes and nothing is left queued")

	// Counted in the database: one redrive per execution, audited under the operator's
	// token; the reopen's and the callback's writes and nothing else on the wait; one
	// event; the nodes as one completion leaves them.
	type row struct {
		count, ok, refused     int
		principals             []string
		version                int64
		waitStatus, names, key string
		events                 int
		wait, sat, timedOut    string
	}
	var unsure, refused, won int
	for _, id := range ids {
		var x row
		err := pool.QueryRow(ctx, `SELECT e.redrive_count,
				(SELECT count(*) FROM audit_log WHERE action = 'execution.redrive' AND target = 'execution/' || e.id AND outcome = 'ok'),
				(SELECT count(*) FROM audit_log WHERE action = 'execution.redrive' AND target = '/api/v1/executions/' || e.id || '/redrive' AND outcome = 'refused 409'),
				(SELECT coalesce(array_agg(DISTINCT principal), '{}') FROM audit_log WHERE action = 'execution.redrive' AND target LIKE '%' || e.id || '%'),
				w.version, w.status, json_array_length(w.received_events), coalesce(w.received_events->0->>'name', ''),
				(SELECT status FROM node_executions WHERE execution_id = e.id AND node_id = 'wait'),
				(SELECT status FROM node_executions WHERE execution_id = e.id AND node_id = $2),
				(SELECT status FROM node_executions WHERE execution_id = e.id AND node_id = $3)
			FROM executions e JOIN execution_wait_states w ON w.execution_id = e.id WHERE e.id = $1`, id, NodeSatisfied, NodeTimedOut).
			Scan(&x.count, &x.ok, &x.refused, &x.principals, &x.version, &x.waitStatus, &x.events, &x.names, &x.wait, &x.sat, &x.timedOut)
		require.NoError(t, err)
		var ok200, r409, u int
		for _, a := range attempts[id] {
			switch {
			case a.Status == http.StatusOK:
				ok200++
			case a.Status == http.StatusConflict:
				r409++
				require.NotEqual(t, "failed", a.Outcome, "execution %s: a failed execution refused", id)
			case a.Unsure:
				u++
			case a.Status != 0:
				t.Fatalf("execution %s: redrive answered %d: %s", id, a.Status, a.Err)
			}
		}
		unsure, refused, won = unsure+u, refused+r409, won+ok200
		require.Equal(t, 1, x.count, "execution %s: redriven once (answers: %d×200, %d×409, %d unanswered)", id, ok200, r409, u)
		require.LessOrEqual(t, ok200, 1, "execution %s: two redrives answered 200", id)
		require.Equal(t, 1, x.ok, "execution %s: one audit row of a redrive that took effect", id)
		require.GreaterOrEqual(t, x.refused, r409, "execution %s: every 409 audited", id)
		require.LessOrEqual(t, x.refused, r409+u, "execution %s: no refusal audited that was not answered or lost", id)
		require.Equal(t, []string{"token:" + OperatorToken}, x.principals, "execution %s", id)
		require.Equal(t, before[id]+2, x.version, "execution %s: version = before + the reopen + the callback", id)
		require.Equal(t, "completed", x.waitStatus)
		require.Equal(t, 1, x.events, "execution %s: the callback recorded once", id)
		require.Equal(t, EventAPI, x.names)
		require.Equal(t, []string{"completed", "completed", "skipped"}, []string{x.wait, x.sat, x.timedOut}, "execution %s: nodes", id)
	}
	t.Logf("%d executions redriven by %d requests: %d answered 200, %d 409, %d cut off by the kill",
		executions, won+refused+unsure, won, refused, unsure)
	require.Positive(t, refused, "concurrent redrives refused")
	require.Positive(t, unsure, "redrives cut off by the kill of replica 0")

	// Counted at the service: one continuation per execution, by Idempotency-Key; a
	// repeat only of a call whose sender was killed before its answer.
	fk.mu.Lock()
	conts := slices.Clone(fk.conts)
	fk.mu.Unlock()
	byKey := map[string][]Continuation{}
	for _, k := range conts {
		byKey[k.IdempotencyKey] = append(byKey[k.IdempotencyKey], k)
	}
	require.Len(t, byKey, executions, "one continuation key per execution")
	redelivered := 0
	for _, id := range ids {
		calls := byKey[id.String()+":"+NodeSatisfied]
		require.NotEmpty(t, calls, "execution %s: its continuation ran", id)
		for _, k := range calls[1:] {
			redelivered++
			require.Equal(t, busy, calls[0].Sender, "execution %s: continuation repeated (first by %s at %s, again by %s at %s), but %s was killed",
				id, calls[0].Sender, calls[0].At.Format(time.StampMilli), k.Sender, k.At.Format(time.StampMilli), busy)
			require.True(t, calls[0].At.Before(contKilledAt), "execution %s: repeated continuation first sent after %s was dead", id, busy)
			require.True(t, k.At.After(contKilledAt), "execution %s: repeated before the kill", id)
		}
	}
	require.Positive(t, redelivered, "the continuation held by the killed replica ran again after its lease")
	t.Logf("replica 0 killed mid-redrive at %s; %s killed with continuations in flight at %s; %d continuations redelivered",
		killedAt.Format(time.StampMilli), busy, contKilledAt.Format(time.StampMilli), redelivered)
}

// kill SIGKILLs replica i and marks it down for the requests that follow.
func kill(r *runner, i int) {
	rep := r.cl.replicas[i]
	rep.mu.Lock()
	p := rep.proc
	rep.mu.Unlock()
	r.setDown(i, true)
	p.kill()
}

// restartReplica starts replica i again and waits until it serves.
func restartReplica(ctx context.Context, r *runner, i int) error {
	rep := r.cl.replicas[i]
	if err := r.cl.startReplica(rep); err != nil {
		return err
	}
	if err := r.cl.waitReady(ctx, rep, 90*time.Second); err != nil {
		return err
	}
	r.setDown(i, false)
	return nil
}
