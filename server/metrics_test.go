package server_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/server"
)

// samples is one scrape of /metrics (the test kit's reader).
type samples = testkit.Samples

// scrapeSamples reads every sample of a running replica's /metrics.
func scrapeSamples(t *testing.T, addr string) samples {
	t.Helper()
	return testkit.Scrape(t, addr)
}

// expectation is a series and the value it must have.
type expectation struct {
	name   string
	labels map[string]string
	value  float64
}

func (e expectation) String() string {
	keys := slices.Sorted(maps.Keys(e.labels))
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%q", k, e.labels[k]))
	}
	return fmt.Sprintf("%s{%s}", e.name, strings.Join(parts, ","))
}

// mismatches lists what in ss differs from want.
func mismatches(ss samples, want []expectation) []string {
	var out []string
	for _, e := range want {
		v, ok, err := ss.Get(e.name, e.labels)
		switch {
		case err != nil:
			out = append(out, err.Error())
		case !ok:
			out = append(out, fmt.Sprintf("%s missing; series: %v", e, ss.Series(e.name)))
		case v != e.value:
			out = append(out, fmt.Sprintf("%s = %g, want %g", e, v, e.value))
		}
	}
	return out
}

// settle scrapes addr until every expectation holds, and returns that scrape; it fails
// with what still differs after timeout. Counters are recorded after the commits they
// describe and the database gauges are cached, so values converge rather than jump.
func settle(t *testing.T, addr string, want []expectation, timeout time.Duration) samples {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := scrapeSamples(t, addr)
		bad := mismatches(got, want)
		if len(bad) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics did not settle:\n%s", strings.Join(bad, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func lbl(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// TestMetricsScenario scripts a known mix of events against one replica with its own
// telemetry — callbacks completing waits, a duplicate, an unknown wait, a malformed
// body, a Kafka record completing a wait, a poison record, a deadline continuing with
// partial results, a timer — and checks that /metrics shows each of them, exactly.
func TestMetricsScenario(t *testing.T) {
	t.Parallel()
	const (
		topic = "metrics.shipments"
		n     = 3 // callback waits
	)
	schema := dbtest.NewSchema(t)
	fake := newFakeService(t)
	cluster, prod := startKafka(t)
	svc := runService(t, server.Config{DatabaseURL: schema.URL, InstanceID: "metrics", AutoMigrate: true, Kafka: kafkaConfig(cluster)})
	base := "http://" + svc.Addr()

	done := func(data map[string]any) map[string]any { // a wait node followed by an http node
		return map[string]any{
			"vars": map[string]any{"svc": fake.URL},
			"nodes": []any{
				data,
				map[string]any{"id": "done", "type": "http", "data": map[string]any{"url": "@{_vars.svc}/done", "method": "POST",
					"body": map[string]any{"execution_id": "@{_execution.id}"}}},
			},
			"edges": []any{map[string]any{"source": "wait", "target": "done"}},
		}
	}
	defs := map[string]map[string]any{
		"cb": done(map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
			"apiCall": map[string]any{"url": "@{_vars.svc}/process"}, "aggregationStrategy": "all", "timeout": 120}}),
		"shipment": done(map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
			"kafkaEvent": map[string]any{"topic": topic}, "aggregationStrategy": "all", "timeout": 120}}),
		"partial": done(map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
			"kafkaEvent": map[string]any{"topic": topic}, "aggregationStrategy": "all", "timeout": 1, "onTimeout": "continue_with_partial"}}),
		"pause": done(map[string]any{"id": "wait", "type": "wait", "data": map[string]any{"for": "500ms"}}),
	}
	for name, def := range defs {
		def["name"] = name
		status, body := testkit.DoJSON(t, http.MethodPut, base+"/api/v1/workflows/"+name, def, nil)
		require.Equal(t, http.StatusCreated, status, body)
	}
	start := func(name string) string {
		status, body := testkit.DoJSON(t, http.MethodPost, base+"/api/v1/workflows/"+name+"/executions", map[string]any{"input": map[string]any{}}, nil)
		require.Equal(t, http.StatusCreated, status, body)
		return body["id"].(string)
	}

	var cbIDs []string
	for range n {
		cbIDs = append(cbIDs, start("cb"))
	}
	shipment := start("shipment")
	var calls []map[string]any
	for range n {
		calls = append(calls, fake.nextCall(t))
	}
	var shipmentCorr string
	require.Eventually(t, func() bool {
		_, v := testkit.DoJSON(t, http.MethodGet, base+"/api/v1/executions/"+shipment, nil, nil)
		waits, _ := v["wait_states"].([]any)
		if len(waits) != 1 {
			return false
		}
		shipmentCorr, _ = waits[0].(map[string]any)["correlation_id"].(string)
		return true
	}, 20*time.Second, 20*time.Millisecond)

	// The first scrape reads the database gauges afresh (they are cached 5 s after it):
	// n+1 waits are open, every node run has committed.
	mid := scrapeSamples(t, svc.Addr())
	require.Empty(t, mismatches(mid, []expectation{
		{"rendezvous_wait_states", lbl("status", "waiting"), n + 1},
		{"rendezvous_wait_states", lbl("status", "scheduled"), 0},
		{"rendezvous_run_queue_depth", lbl("kind", "run"), 0},
		{"rendezvous_run_queue_depth", lbl("kind", "resume"), 0},
		{"rendezvous_sweeper_lag_seconds", nil, 0},
	}))

	partial, pause := start("partial"), start("pause")

	// Callbacks: each wait answered once, the first twice; an unknown wait; a body that
	// is not JSON.
	callback := func(body any) (int, map[string]any) {
		return testkit.DoJSON(t, http.MethodPost, base+"/api/internal/callbacks/acme", body, nil)
	}
	for _, c := range calls {
		status, body := callback(map[string]any{"execution_id": c["execution_id"], "correlation_id": c["correlation_id"], "ok": true})
		require.Equal(t, http.StatusAccepted, status, body)
		require.Equal(t, "completed", body["status"])
	}
	status, body := callback(map[string]any{"execution_id": calls[0]["execution_id"], "correlation_id": calls[0]["correlation_id"], "ok": true})
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "duplicate", body["status"])
	status, body = callback(map[string]any{"execution_id": uuid.NewString(), "correlation_id": uuid.NewString(), "ok": true})
	require.Equal(t, http.StatusNotFound, status, body)
	status, body = callback([]byte(`{"execution_id": "oops`))
	require.Equal(t, http.StatusBadRequest, status, body)

	// Kafka: a poison record, then the shipment's record, on the topic's one partition.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, prod.ProduceSync(ctx,
		&kgo.Record{Topic: topic, Value: []byte("not json")},
		&kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf(`{"execution_id":%q,"correlation_id":%q}`, shipment, shipmentCorr))},
	).FirstErr())

	for _, id := range append(cbIDs, shipment, partial, pause) {
		waitStatus(t, base, id, "completed")
	}
	dlq := deadLetters(t, cluster.ListenAddrs(), topic+".dlq", 1)
	require.Equal(t, "not json", string(dlq[0].Value))

	want := []expectation{
		{"rendezvous_events_applied_total", lbl("source", "callback", "outcome", "completed"), n},
		{"rendezvous_events_applied_total", lbl("source", "callback", "outcome", "recorded"), 0},
		{"rendezvous_events_applied_total", lbl("source", "kafka", "outcome", "completed"), 1},
		{"rendezvous_events_applied_total", lbl("source", "kafka", "outcome", "recorded"), 0},
		{"rendezvous_events_not_applied_total", lbl("source", "callback", "reason", "duplicate"), 1},
		{"rendezvous_events_not_applied_total", lbl("source", "callback", "reason", "not_found"), 1},
		{"rendezvous_events_not_applied_total", lbl("source", "callback", "reason", "poison"), 1},
		{"rendezvous_events_not_applied_total", lbl("source", "kafka", "reason", "poison"), 1},
		{"rendezvous_wait_first_event_total", lbl("event", "api_response"), n},
		{"rendezvous_wait_first_event_total", lbl("event", "kafka_event"), 1},
		{"rendezvous_timers_fired_total", nil, 1},
		{"rendezvous_lock_conflicts_total", nil, 0},
		{"rendezvous_dead_letter_records_total", lbl("topic", topic, "reason", "not_json"), 1},
		{"rendezvous_outbound_calls_total", lbl("result", "ok"), n},
		{"rendezvous_wait_duration_seconds_count", lbl("workflow", "cb", "strategy", "all", "outcome", "completed"), n},
		{"rendezvous_wait_duration_seconds_count", lbl("workflow", "shipment", "strategy", "all", "outcome", "completed"), 1},
		{"rendezvous_wait_duration_seconds_count", lbl("workflow", "partial", "strategy", "all", "outcome", "timeout"), 1},
		{"rendezvous_wait_duration_seconds_count", lbl("workflow", "pause", "strategy", "timer", "outcome", "resumed"), 1},
		{"rendezvous_wait_states", lbl("status", "waiting"), 0},
		{"rendezvous_wait_states", lbl("status", "scheduled"), 0},
		{"rendezvous_run_queue_depth", lbl("kind", "run"), 0},
		{"rendezvous_run_queue_depth", lbl("kind", "resume"), 0},
		{"rendezvous_kafka_consumer_lag", lbl("topic", topic, "partition", "0"), 0},
		{"rendezvous_sweeper_lag_seconds", nil, 0},
		{"rendezvous_database_errors_total", lbl("component", "aggregator"), 0},
		// The partial wait left its warning on the node.
		{"rendezvous_nodes_warnings_total", lbl("reason", "partial_data"), 1},
	}
	for _, onTimeout := range []string{"fail", "continue", "continue_with_partial"} {
		for _, outcome := range []string{"fail", "continue", "partial"} {
			v := 0.0
			if onTimeout == "continue_with_partial" && outcome == "partial" {
				v = 1
			}
			want = append(want, expectation{"rendezvous_timeouts_total", lbl("on_timeout", onTimeout, "outcome", outcome), v})
		}
	}
	// The gauges' cache, filled by the first scrape, expires within 5 s.
	got := settle(t, svc.Addr(), want, 15*time.Second)

	// Nothing else was counted: no other reason, outcome, result or wait.
	count := func(name string) int { return len(got.Series(name)) }
	require.Equal(t, 4, count("rendezvous_events_applied_total"), got.Series("rendezvous_events_applied_total"))
	require.Equal(t, 4, count("rendezvous_events_not_applied_total"), got.Series("rendezvous_events_not_applied_total"))
	require.Equal(t, 2, count("rendezvous_wait_first_event_total"), got.Series("rendezvous_wait_first_event_total"))
	require.Equal(t, 1, count("rendezvous_dead_letter_records_total"), got.Series("rendezvous_dead_letter_records_total"))
	require.Equal(t, 1, count("rendezvous_outbound_calls_total"), got.Series("rendezvous_outbound_calls_total"))
	require.Equal(t, 4, count("rendezvous_wait_duration_seconds_count"), got.Series("rendezvous_wait_duration_seconds_count"))
	require.Equal(t, 1, count("rendezvous_kafka_consumer_lag"), got.Series("rendezvous_kafka_consumer_lag"))
	for _, s := range got {
		if s.Name == "rendezvous_database_errors_total" {
			require.Zero(t, s.Value, "database errors: %v", got.Series(s.Name))
		}
	}
	for _, name := range []string{"rendezvous_events_applied_total", "rendezvous_wait_duration_seconds_count", "rendezvous_outbound_calls_total",
		"rendezvous_dead_letter_records_total", "rendezvous_kafka_consumer_lag", "rendezvous_run_queue_depth", "rendezvous_wait_states"} {
		t.Logf("%s: %v", name, got.Series(name))
	}
}

// deadLetters reads n records from a dead-letter topic.
func deadLetters(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		f := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "only %d of %d dead letters on %s", len(out), n, topic)
		f.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		out = append(out, f.Records()...)
	}
	return out
}
