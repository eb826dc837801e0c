package chaos

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// joinExecutions is how many executions each join test starts, two waits each.
const joinExecutions = 40

// TestJoinSurvivesSIGKILL ends both parallel waits of each execution at the same moment,
// one callback to each of two `rendezvous serve` processes, and SIGKILLs one of them
// while its callbacks are inside their transactions; the callbacks it never answered are
// sent again to the other, as a caller retries. See joinRig for what is counted.
//
// It does not run in parallel, for the same reason as TestRedriveSurvivesSIGKILL.
func TestJoinSurvivesSIGKILL(t *testing.T) {
	g := startJoinRig(t, false)
	var mu sync.Mutex
	cut := 0
	g.race(func() int { return 0 }, func(i int, w joinWait) {
		payload, _ := json.Marshal(map[string]any{"execution_id": w.exec.String(), "correlation_id": w.corr.String(), "decision": "approved"})
		atts := g.r.post(0, i, "/api/internal/callbacks/chaos", payload, http.Header{"Content-Type": {"application/json"}})
		last := atts[len(atts)-1]
		// 202, or 200 when an earlier request whose answer was cut off recorded it.
		if last.Status != http.StatusAccepted && last.Status != http.StatusOK {
			t.Errorf("wait %s of %s: callback answered %+v", w.node, w.exec, atts)
		}
		mu.Lock()
		if slices.ContainsFunc(atts, func(a Attempt) bool { return a.Unsure }) {
			cut++
		}
		mu.Unlock()
	})
	g.check(1)
	require.Positive(t, cut, "callbacks cut off by the kill of replica 0")
	t.Logf("%d callbacks cut off by the kill and sent again", cut)
}

// TestKafkaJoinSurvivesSIGKILL is TestJoinSurvivesSIGKILL with the waits' events as
// Kafka records, keyed by correlation id: the two of most executions fall on two
// partitions, applied in two transactions (by two lanes, or two replicas). The replica
// owning most of the topic's partitions while the records wait is killed; its records
// come back to the other once the broker has dropped it from the group, from the
// offsets it last committed, and are applied there, the two of an execution again in
// two transactions.
func TestKafkaJoinSurvivesSIGKILL(t *testing.T) {
	g := startJoinRig(t, true)
	var mu sync.Mutex
	var partitions []int32 // where each record went
	// The victim is chosen once the records wait in the replicas' lanes, from the
	// group as it stands then: the replica owning most of the topic's partitions.
	var sample GroupSample
	owned := func(i int) []int32 {
		for _, m := range sample.Members {
			if m.ClientID == instanceID(i) {
				return m.Partitions
			}
		}
		return nil
	}
	victim := -1
	g.race(func() int {
		var err error
		sample, err = g.cl.sampleGroup(g.ctx)
		require.NoError(t, err)
		victim = 0
		if len(owned(1)) > len(owned(0)) {
			victim = 1
		}
		return victim
	}, func(_ int, w joinWait) {
		value, headers := kafkaValue(IDsFields, w.exec, w.corr, "chaos.done", map[string]any{})
		p := g.r.produce(Topic, w.corr, value, headers, false)
		if p.Err != "" {
			t.Errorf("wait %s of %s: record not produced: %s", w.node, w.exec, p.Err)
		}
		mu.Lock()
		partitions = append(partitions, p.Partition)
		mu.Unlock()
	})
	g.check(1 - victim)
	onKilled := 0
	for _, p := range partitions {
		if slices.Contains(owned(victim), p) {
			onKilled++
		}
	}
	require.Positive(t, onKilled, "records on partitions of the killed replica; the group: %s", sample.key())
	t.Logf("group %s; replica %d killed; %d of %d records were on its partitions", sample.key(), victim, onKilled, 2*joinExecutions)
}

// joinWait is one of the two waits of an execution, as registered.
type joinWait struct {
	exec, corr uuid.UUID
	node       string
	version    int64
}

// joinRig is two `rendezvous serve` processes and an external service, with a workflow
// of two waits side by side followed by a join (an http node calling the service), and
// joinExecutions executions started and parked at both waits.
//
// The two transactions ending an execution's waits each continue the execution in the
// transaction that records the event. Whichever commits second must see the first's
// wait as ended, though that wait's node is still stored as waiting (a node's outcome is
// in its wait's row), or the join never runs. race makes them meet under a kill; check
// counts in the database and at the service that every execution completed, each wait
// recorded its event once and resumed once (by the replica that was not killed), and
// the join ran once per execution.
type joinRig struct {
	t     *testing.T
	ctx   context.Context
	cl    *cluster
	r     *runner
	fk    *killFake
	pool  *pgxpool.Pool
	ids   []uuid.UUID
	waits []joinWait
}

func startJoinRig(t *testing.T, kafkaEvents bool) *joinRig {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	fk := startKillFake(t, 0)
	fk.setDown(false)
	r, pool := startKillCluster(ctx, t, "join_kill", fk.url())
	cl := r.cl
	prod, err := kgo.NewClient(kgo.SeedBrokers(cl.kafkaAddr), kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	r.prod = prod
	g := &joinRig{t: t, ctx: ctx, cl: cl, r: r, fk: fk, pool: pool}

	// Each wait calls the service, or waits for a record of the chaos topic.
	wait := func(branch string) map[string]any {
		w := map[string]any{"aggregationStrategy": "all", "timeout": "10m", "onTimeout": "fail"}
		if kafkaEvents {
			w["kafkaEvent"] = map[string]any{"topic": Topic, "executionIdField": "execution_id", "correlationIdField": "correlation_id"}
		} else {
			w["apiCall"] = map[string]any{"url": "@{_vars.fake}/calls", "method": "POST", "body": map[string]any{"branch": branch}}
		}
		return w
	}
	def := map[string]any{
		"name": "join-kill",
		"vars": map[string]any{"fake": fk.url(), "sender": "unknown"},
		"nodes": []any{
			map[string]any{"id": "a", "type": "wait_events", "data": wait("a")},
			map[string]any{"id": "b", "type": "wait_events", "data": wait("b")},
			map[string]any{"id": "join", "type": "http", "data": map[string]any{
				"url": "@{_vars.fake}/continuations", "method": "POST", "timeout": 5,
				"headers": map[string]any{"X-Chaos-Sender": "@{_vars.sender}"},
				"body":    map[string]any{"kind": "join", "execution_id": "@{_execution.id}"}}},
		},
		"edges": []any{map[string]any{"source": "a", "target": "join"}, map[string]any{"source": "b", "target": "join"}},
	}
	raw, err := json.Marshal(def)
	require.NoError(t, err)
	for i := range cl.replicas { // each picks up the topic at once
		require.NoError(t, r.putWorkflow(ctx, i, "join-kill", raw))
	}
	if kafkaEvents {
		// Every partition of the topic assigned. The balancer may give one replica all of
		// them (and the other the events topic's).
		require.NoError(t, cl.waitGroupStable(ctx, 2, []string{Topic}, time.Minute))
	}

	g.ids = make([]uuid.UUID, joinExecutions)
	for i := range g.ids {
		g.ids[i] = startExecution(t, r, i%2, "join-kill", map[string]any{})
	}
	// Both waits of every execution registered and no call left to send: the versions
	// read now are the ones the events move.
	require.Eventually(t, func() bool {
		g.waits = g.waits[:0]
		rows, err := pool.Query(ctx, `SELECT execution_id, correlation_id, node_id, version FROM execution_wait_states
			WHERE execution_id = ANY($1) AND status = 'waiting' AND NOT EXISTS (SELECT 1 FROM outbox)`, g.ids)
		if err != nil {
			return false
		}
		for rows.Next() {
			var w joinWait
			if rows.Scan(&w.exec, &w.corr, &w.node, &w.version) != nil {
				return false
			}
			g.waits = append(g.waits, w)
		}
		if rows.Err() != nil || len(g.waits) != 2*joinExecutions {
			return false
		}
		fk.mu.Lock()
		defer fk.mu.Unlock()
		return kafkaEvents || len(fk.calls) == 2*joinExecutions
	}, time.Minute, 100*time.Millisecond, "both waits of every execution registered")
	return g
}

// race locks every execution, delivers each wait's event at once (deliver is called in a
// goroutine of its own per wait, with i 0 for one wait of an execution and 1 for the
// other, so that their callbacks go to two replicas), waits until the replicas'
// transactions recording them wait for the lock, SIGKILLs the replica victim names,
// releases the lock and waits for every delivery to return. The victim had committed nothing, and
// held nothing but those transactions: every correlated call was answered before and no
// continuation had begun, so no lease has to pass before the other replica has done
// everything.
func (g *joinRig) race(victim func() int, deliver func(i int, w joinWait)) {
	t := g.t
	lock, err := g.pool.Begin(g.ctx)
	require.NoError(t, err)
	// Released at the latest when the test ends, before the pool is closed.
	defer func() { _ = lock.Rollback(context.Background()) }()
	_, err = lock.Exec(g.ctx, `SELECT 1 FROM executions WHERE id = ANY($1) FOR UPDATE`, g.ids)
	require.NoError(t, err)
	var deliveries sync.WaitGroup
	side := map[uuid.UUID]int{} // the side of each execution's first wait
	for _, w := range g.waits {
		i, second := side[w.exec]
		if second {
			i = 1 - i
		} else {
			i = len(side) % 2
			side[w.exec] = i
		}
		deliveries.Go(func() { deliver(i, w) })
	}
	// A replica records the events that arrive together in one transaction, so a
	// transaction or two of each replica waits for the lock, with its other events queued
	// behind them; half a second more lets every event reach its replica before the kill.
	require.Eventually(t, func() bool {
		var waiting int
		err := g.pool.QueryRow(g.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'`, g.cl.dbName).Scan(&waiting)
		return err == nil && waiting >= 2
	}, 20*time.Second, 20*time.Millisecond, "events waiting for the locked executions")
	time.Sleep(500 * time.Millisecond)
	kill(g.r, victim())
	require.NoError(t, lock.Rollback(g.ctx))
	deliveries.Wait()
}

// check waits until every execution completed, then counts; survivor is the replica
// that was not killed.
func (g *joinRig) check(survivor int) {
	t, ctx := g.t, g.ctx
	require.Eventually(t, func() bool {
		var open int
		err := g.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM executions WHERE id = ANY($1) AND status <> 'completed')
			+ (SELECT count(*) FROM run_queue) + (SELECT count(*) FROM outbox)`, g.ids).Scan(&open)
		return err == nil && open == 0
	}, time.Minute, 200*time.Millisecond, "every execution completes and nothing is left queued")

	// In the database: each wait took its event once, was resumed once by the replica
	// that survived, and its version moved by that event alone; each join completed.
	for _, w := range g.waits {
		var status, resumedBy string
		var events int
		var version int64
		require.NoError(t, g.pool.QueryRow(ctx, `SELECT status, json_array_length(received_events), version, coalesce(resumed_by, '')
			FROM execution_wait_states WHERE correlation_id = $1`, w.corr).Scan(&status, &events, &version, &resumedBy))
		require.Equal(t, "completed", status, "wait %s of %s", w.node, w.exec)
		require.Equal(t, 1, events, "wait %s of %s: its event recorded once", w.node, w.exec)
		require.Equal(t, w.version+1, version, "wait %s of %s: version = before + the event", w.node, w.exec)
		require.Equal(t, instanceID(survivor), resumedBy, "wait %s of %s", w.node, w.exec)
	}
	for _, id := range g.ids {
		var join string
		require.NoError(t, g.pool.QueryRow(ctx, `SELECT status FROM node_executions WHERE execution_id = $1 AND node_id = 'join'`, id).Scan(&join))
		require.Equal(t, "completed", join, "execution %s", id)
	}

	// At the service: the join called it once per execution, and nothing else did.
	g.fk.mu.Lock()
	conts := slices.Clone(g.fk.conts)
	g.fk.mu.Unlock()
	byKey := map[string]int{}
	for _, k := range conts {
		byKey[k.IdempotencyKey]++
	}
	for _, id := range g.ids {
		require.Equal(t, 1, byKey[id.String()+":join"], "execution %s: the join's calls", id)
	}
	require.Len(t, conts, joinExecutions, "no other continuation call")
}
