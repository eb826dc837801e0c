package server_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
	"github.com/rendezvous-run/rendezvous/server"
)

// fakeService is the test kit's fake external service, answering the continuation's
// call (POST /done) with {"ok":true}; nextCall hands the test the correlated calls
// (POST /process) one by one, to call back when it chooses.
type fakeService struct {
	*testkit.FakeService
	taken int
}

func newFakeService(t *testing.T) *fakeService {
	f := testkit.NewFakeService(t)
	f.On("/done", testkit.Always(testkit.OK))
	return &fakeService{FakeService: f}
}

// nextCall waits for the fake service's next correlated call and returns its body, with
// the headers the tests check added as _hdr_exec, _hdr_corr, _idem and _traceparent.
func (f *fakeService) nextCall(t *testing.T) map[string]any {
	t.Helper()
	f.taken++
	r := f.AwaitNth(t, 20*time.Second, "/process", f.taken)
	body := r.Body
	body["_hdr_exec"] = r.Header.Get("X-Execution-Id")
	body["_hdr_corr"] = r.Header.Get("X-Correlation-Id")
	body["_idem"] = r.Header.Get("Idempotency-Key")
	body["_traceparent"] = r.Header.Get("Traceparent")
	return body
}

// startServices starts n replicas on the database at url.
func startServices(t *testing.T, url string, n int) []*server.Service {
	t.Helper()
	var out []*server.Service
	for i := range n {
		cfg := replica.Config(t, url, fmt.Sprintf("pod-%d", i))
		cfg.DBMaxConns = 10
		out = append(out, replica.Start(t, cfg).Service)
	}
	return out
}

// TestReplicasJoinParallelWaitsOnce: two parallel waits of each execution feed a join,
// and their callbacks arrive at the same moment at two different replicas, each of which
// continues the execution in the transaction that records its event. Whichever commits
// second must see the other wait's outcome: every execution completes, its join runs
// once, and each wait resumes once.
func TestReplicasJoinParallelWaitsOnce(t *testing.T) {
	t.Parallel()
	schema := dbtest.NewSchema(t)
	fake := newFakeService(t)
	svcs := startServices(t, schema.URL, 3)

	wait := func(branch string) map[string]any {
		return map[string]any{"apiCall": map[string]any{"url": "@{_vars.serviceUrl}/process",
			"body": map[string]any{"branch": branch}}, "aggregationStrategy": "all", "timeout": 300}
	}
	def := map[string]any{
		"name": "join",
		"vars": map[string]any{"serviceUrl": fake.URL},
		"nodes": []any{
			map[string]any{"id": "a", "type": "wait_events", "data": wait("a")},
			map[string]any{"id": "b", "type": "wait_events", "data": wait("b")},
			map[string]any{"id": "notify", "type": "http", "data": map[string]any{"url": "@{_vars.serviceUrl}/done",
				"method": "POST", "body": map[string]any{"execution_id": "@{_execution.id}"}}},
		},
		"edges": []any{map[string]any{"source": "a", "target": "notify"}, map[string]any{"source": "b", "target": "notify"}},
	}
	addr := func(i int) string { return "http://" + svcs[i%len(svcs)].Addr() }
	status, body := testkit.DoJSON(t, http.MethodPut, addr(0)+"/api/v1/workflows/join", def, nil)
	require.Equal(t, http.StatusCreated, status, body)

	const n = 60
	for i := range n {
		status, body := testkit.DoJSON(t, http.MethodPost, addr(i)+"/api/v1/workflows/join/executions",
			map[string]any{"input": map[string]any{}}, nil)
		require.Equal(t, http.StatusCreated, status, body)
	}
	calls := map[string][]map[string]any{} // by execution: its two correlated calls
	for range 2 * n {
		r := fake.nextCall(t)
		calls[r["_hdr_exec"].(string)] = append(calls[r["_hdr_exec"].(string)], r)
	}
	require.Len(t, calls, n)

	start := make(chan struct{})
	var wg sync.WaitGroup
	i := 0
	for exec, pair := range calls {
		require.Len(t, pair, 2, exec)
		for j, r := range pair {
			to := addr(i + j) // the two callbacks of an execution go to two replicas
			wg.Go(func() {
				<-start
				status, body := testkit.DoJSON(t, http.MethodPost, to+"/api/internal/callbacks/acme",
					map[string]any{"execution_id": exec, "correlation_id": r["_hdr_corr"]}, nil)
				if status != http.StatusAccepted {
					t.Errorf("callback answered %d: %v", status, body)
				}
			})
		}
		i++
	}
	close(start)
	wg.Wait()

	ctx := context.Background()
	require.Eventually(t, func() bool {
		var done int
		err := svcs[0].Pool().QueryRow(ctx, "SELECT count(*) FROM executions WHERE status = 'completed'").Scan(&done)
		return err == nil && done == n
	}, 60*time.Second, 100*time.Millisecond)
	var resumed int
	require.NoError(t, svcs[0].Pool().QueryRow(ctx,
		`SELECT count(*) FROM execution_wait_states WHERE resumed_at IS NOT NULL AND status = 'completed'`).Scan(&resumed))
	require.Equal(t, 2*n, resumed)
	done := fake.CountBy("/done", "execution_id")
	for exec := range calls {
		require.Equal(t, 1, done[exec], "the join of %s ran %d times", exec, done[exec])
	}
}

// TestReplicasResumeExactlyOnce is the exactly-once scenario with three replicas:
// 200 executions, callbacks in random order to random replicas, some twice; every
// execution completes with its aggregated output and each wait resumes exactly once.
func TestReplicasResumeExactlyOnce(t *testing.T) {
	t.Parallel()
	schema := dbtest.NewSchema(t)
	fake := newFakeService(t)
	svcs := startServices(t, schema.URL, 3)
	base := func() string { return "http://" + svcs[rand.IntN(len(svcs))].Addr() }

	def := map[string]any{
		"name": "order",
		"vars": map[string]any{"serviceUrl": fake.URL},
		"nodes": []any{
			map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
				"apiCall": map[string]any{
					"url":  "@{_vars.serviceUrl}/process",
					"body": map[string]any{"order": "@{_trigger.order}"},
				},
				"aggregationStrategy": "all",
				"timeout":             300,
			}},
			map[string]any{"id": "notify", "type": "http", "data": map[string]any{
				"url":    "@{_vars.serviceUrl}/done",
				"method": "POST",
				"body": map[string]any{
					"execution_id": "@{_execution.id}",
					"reply":        "@{nodes.wait.output.apiResponse.result}",
				},
			}},
		},
		"edges": []any{map[string]any{"source": "wait", "target": "notify", "condition": "output.timeout == false"}},
	}
	status, body := testkit.DoJSON(t, http.MethodPut, base()+"/api/v1/workflows/order", def, nil)
	require.Equal(t, http.StatusCreated, status, body)

	const n = 200
	ids := make([]string, n)
	for i := range n {
		status, body := testkit.DoJSON(t, http.MethodPost, base()+"/api/v1/workflows/order/executions",
			map[string]any{"input": map[string]any{"order": i}}, nil)
		require.Equal(t, http.StatusCreated, status, body)
		ids[i] = body["id"].(string)
	}

	// Collect the correlated calls, then answer them in random order, some twice.
	var reqs []map[string]any
	for len(reqs) < n {
		reqs = append(reqs, fake.nextCall(t))
	}
	rand.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	var dup atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, r := range reqs {
		require.Equal(t, r["execution_id"], r["_hdr_exec"])
		require.Equal(t, r["correlation_id"], r["_hdr_corr"])
		require.Equal(t, r["correlation_id"], r["_idem"])
		times := 1
		if rand.IntN(4) == 0 {
			times = 2
		}
		for range times {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				status, body := testkit.DoJSON(t, http.MethodPost, base()+"/api/internal/callbacks/acme",
					map[string]any{"execution_id": r["execution_id"], "correlation_id": r["correlation_id"], "result": r["order"]}, nil)
				switch status {
				case http.StatusAccepted:
				case http.StatusOK:
					dup.Add(1)
				default:
					t.Errorf("callback answered %d: %v", status, body)
				}
			}()
		}
	}
	wg.Wait()

	require.Eventually(t, func() bool {
		var done int
		err := svcs[0].Pool().QueryRow(context.Background(), "SELECT count(*) FROM executions WHERE status = 'completed'").Scan(&done)
		return err == nil && done == n
	}, 60*time.Second, 100*time.Millisecond)

	ctx := context.Background()
	var resumed, distinctResumers int
	require.NoError(t, svcs[0].Pool().QueryRow(ctx,
		`SELECT count(*) FILTER (WHERE resumed_at IS NOT NULL), count(DISTINCT resumed_by) FROM execution_wait_states`).Scan(&resumed, &distinctResumers))
	require.Equal(t, n, resumed)
	var badVersions int
	require.NoError(t, svcs[0].Pool().QueryRow(ctx,
		`SELECT count(*) FROM execution_wait_states WHERE version <> 2 OR json_array_length(received_events) <> 1 OR status <> 'completed'`).Scan(&badVersions))
	require.Zero(t, badVersions, "each wait records exactly one event and one version bump")

	done, calls := fake.CountBy("/done", "execution_id"), fake.CountBy("/process", "execution_id")
	for _, id := range ids {
		require.Equal(t, 1, done[id], "continuation of %s ran %d times", id, done[id])
		require.Equal(t, 1, calls[id], "correlated call of %s sent %d times", id, calls[id])
	}
	// The aggregated output reached the continuation.
	status, view := testkit.DoJSON(t, http.MethodGet, base()+"/api/v1/executions/"+ids[7], nil, nil)
	require.Equal(t, http.StatusOK, status)
	nodes := view["nodes"].([]any)
	var waitOut map[string]any
	for _, nd := range nodes {
		if m := nd.(map[string]any); m["id"] == "wait" {
			waitOut = m["output"].(map[string]any)
		}
	}
	require.Equal(t, float64(7), waitOut["apiResponse"].(map[string]any)["result"])
	require.Equal(t, []any{"api_response"}, waitOut["arrival_order"])
	t.Logf("duplicates answered 200: %d; resumes spread over %d replicas", dup.Load(), distinctResumers)
}

// startKafka starts an in-process Kafka-protocol broker (one partition per auto-created
// topic) and a producer on it; both close when the test ends, after the services that
// were started later.
func startKafka(t *testing.T) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	return cluster, prod
}

// kafkaConfig consumes from cluster with fast topic refresh and backoff.
func kafkaConfig(cluster *kfake.Cluster) consumer.Config {
	return consumer.Config{
		Brokers: cluster.ListenAddrs(), AllowAutoTopicCreation: true,
		TopicRefresh: 200 * time.Millisecond, BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
	}
}

// runService starts a replica with cfg (test defaults for the address, logger, pool and
// executor polling when unset) and stops it, waiting for Run to return, when the test
// ends.
func runService(t *testing.T, cfg server.Config) *server.Service {
	t.Helper()
	if cfg.Auth.BootstrapToken == "" && cfg.Auth.OIDC.Issuer == "" {
		// Tests of other things than access control reach the API without credentials.
		cfg.Auth.Insecure = true
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	if cfg.DBMaxConns == 0 {
		cfg.DBMaxConns = 8
	}
	if cfg.Logger == nil {
		cfg.Logger = testkit.Logger(t)
	}
	if cfg.Executor.PollInterval == 0 {
		cfg.Executor.PollInterval = 50 * time.Millisecond
	}
	if cfg.Executor.Outbound.Allow == nil {
		cfg.Executor.Outbound.Allow = []string{"127.0.0.1"} // the fake service
	}
	return replica.Start(t, cfg).Service
}

// waitStatus polls an execution until it has the given status.
func waitStatus(t *testing.T, base, id, status string) {
	t.Helper()
	var last map[string]any
	require.Eventually(t, func() bool {
		_, last = testkit.DoJSON(t, http.MethodGet, base+"/api/v1/executions/"+id, nil, nil)
		return last["status"] == status
	}, 20*time.Second, 20*time.Millisecond, "execution %s never became %s: %v", id, status, last)
}
