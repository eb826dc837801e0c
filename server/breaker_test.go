package server_test

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
	"github.com/rendezvous-run/rendezvous/outbound"
)

// TestCircuitBreakerHoldsQueuedCalls: the external service is down while 100 correlated
// calls queue across two replicas. Each replica's circuit for it opens after its
// threshold of failures, and then only its probes reach the service, however long it
// stays down, where without a breaker every call would spend its attempts and fail. No
// call is lost: once the service is back, every call reaches it and succeeds exactly
// once, and every execution still waits for its reply. (The scenario is 500 calls and a
// 30 s outage scaled down to 100 calls and about 2 s, to keep the test short.)
func TestCircuitBreakerHoldsQueuedCalls(t *testing.T) {
	t.Parallel()
	const (
		calls    = 100
		failures = 3
		workers  = 4
		openFor  = 400 * time.Millisecond
	)
	schema := dbtest.NewSchema(t)
	fake := testkit.NewFakeService(t)
	var (
		down     atomic.Bool
		mu       sync.Mutex
		whileOut int
		ok       = map[string]int{}
	)
	down.Store(true)
	fake.On("/process", func(_ int, r testkit.Request) testkit.Reply {
		mu.Lock()
		defer mu.Unlock()
		if down.Load() {
			whileOut++
			return testkit.Reply{Status: http.StatusServiceUnavailable, Body: `{"error":"down"}`}
		}
		ok[r.Field("correlation_id")]++
		return testkit.Accepted
	})
	host := strings.TrimPrefix(fake.URL, "http://")
	var rs []*replica.Replica
	for i := range 2 {
		cfg := replica.Config(t, schema.URL, fmt.Sprintf("breaker-%d", i))
		cfg.DBMaxConns = 8
		cfg.Executor.PollInterval = 50 * time.Millisecond
		cfg.Executor.OutboxWorkers = workers
		// Without the breaker these would spend a call's 8 attempts in about a second.
		cfg.Executor.OutboxBackoffMin, cfg.Executor.OutboxBackoffMax = 10*time.Millisecond, 100*time.Millisecond
		cfg.Executor.Outbound.Breaker = outbound.BreakerConfig{Failures: failures, OpenFor: openFor, Probes: 1}
		rs = append(rs, replica.Start(t, cfg))
	}
	def := map[string]any{"name": "held", "nodes": []any{map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
		"timeout": "1h", "apiCall": map[string]any{"url": fake.URL + "/process"}}}}}
	status, body := testkit.DoJSON(t, http.MethodPut, rs[0].URL()+"/api/v1/workflows/held", def, nil)
	require.Equal(t, http.StatusCreated, status, body)
	outage := time.Now()
	ids := make([]string, calls)
	for i := range calls {
		status, body := testkit.DoJSON(t, http.MethodPost, rs[i%2].URL()+"/api/v1/workflows/held/executions", map[string]any{"input": map[string]any{}}, nil)
		require.Equal(t, http.StatusCreated, status, body)
		ids[i] = body["id"].(string)
	}

	// Both circuits open: each replica names the host in /readyz, and its gauge says open.
	for _, r := range rs {
		require.Eventually(t, func() bool {
			status, body := testkit.DoJSON(t, http.MethodGet, r.URL()+"/readyz", nil, nil)
			circuits, _ := body["outbound_circuits"].(map[string]any)
			return status == http.StatusOK && circuits[host] != nil
		}, 20*time.Second, 20*time.Millisecond)
	}
	state, _ := testkit.Scrape(t, rs[0].URL()).First("rendezvous_outbound_circuit_state", map[string]string{"host": host})
	require.Contains(t, []float64{1, 2}, state, "open or probing")
	// Down for a while longer: until four more requests (probes, one per replica and
	// open period) reached the service.
	mu.Lock()
	base := whileOut
	mu.Unlock()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return whileOut >= base+4
	}, 20*time.Second, 10*time.Millisecond, "the circuits never probed")
	mu.Lock()
	down.Store(false)
	sentWhileDown := whileOut
	mu.Unlock()
	downFor := time.Since(outage)

	// What reached the service while it was down: per replica, the failures that opened
	// its circuit, the calls already in flight then, and a probe per open period.
	probes := int(math.Ceil(downFor.Seconds()/openFor.Seconds())) + 1
	bound := 2 * (failures + workers + probes)
	require.LessOrEqual(t, sentWhileDown, bound, "calls kept reaching the service while it was down (%s)", downFor)

	// Back: every call succeeds exactly once, none was given up, and the circuits close.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ok) == calls
	}, 60*time.Second, 20*time.Millisecond, "not every call reached the service after it came back")
	for _, r := range rs {
		require.Eventually(t, func() bool {
			_, body := testkit.DoJSON(t, http.MethodGet, r.URL()+"/readyz", nil, nil)
			return body["outbound_circuits"] == nil
		}, 20*time.Second, 20*time.Millisecond, "the circuit stays open")
	}
	for _, id := range ids {
		_, body := testkit.DoJSON(t, http.MethodGet, rs[0].URL()+"/api/v1/executions/"+id, nil, nil)
		require.Equal(t, "waiting", body["status"], "execution %s", id)
	}
	mu.Lock()
	defer mu.Unlock()
	for corr, n := range ok {
		require.Equal(t, 1, n, "call %s succeeded %d times", corr, n)
	}
	held := 0.0
	for _, r := range rs {
		held += testkit.Scrape(t, r.URL()).Sum("rendezvous_outbound_calls_total", map[string]string{"result": "held"})
	}
	require.Positive(t, held)
	t.Logf("down %s: %d requests reached it (bound %d) for %d calls; %v held by the circuits; then %d calls succeeded once each",
		downFor.Round(time.Millisecond), sentWhileDown, bound, calls, held, len(ok))
}
