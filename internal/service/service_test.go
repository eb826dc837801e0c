package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/internal/auth"
	"github.com/rendezvous-run/rendezvous/internal/dbtest"
	"github.com/rendezvous-run/rendezvous/internal/service"
)

// fakeService plays the external service: it answers the correlated call at once and
// calls back later, and it counts the continuation's side effects per execution.
type fakeService struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int // execution id -> correlated calls received
	done  map[string]int // execution id -> continuation calls received
	reqs  chan map[string]any
}

func newFakeService(t *testing.T) *fakeService {
	f := &fakeService{calls: map[string]int{}, done: map[string]int{}, reqs: make(chan map[string]any, 10000)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /process", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		body["_hdr_exec"] = r.Header.Get("X-Execution-Id")
		body["_hdr_corr"] = r.Header.Get("X-Correlation-Id")
		body["_idem"] = r.Header.Get("Idempotency-Key")
		body["_traceparent"] = r.Header.Get("Traceparent")
		f.mu.Lock()
		f.calls[fmt.Sprint(body["execution_id"])]++
		f.mu.Unlock()
		f.reqs <- body
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("POST /done", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.done[fmt.Sprint(body["execution_id"])]++
		f.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func startServices(t *testing.T, url string, n int) []*service.Service {
	t.Helper()
	var out []*service.Service
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for i := range n {
		s, err := service.New(ctx, service.Config{
			// Authentication is tested in internal/service; here it would only be in the way.
			Auth:        auth.Config{Insecure: true},
			DatabaseURL: url, HTTPAddr: "127.0.0.1:0", InstanceID: fmt.Sprintf("pod-%d", i),
			AutoMigrate: true, DBMaxConns: 10, Logger: logger,
		})
		require.NoError(t, err)
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Run(ctx) }()
		out = append(out, s)
	}
	return out
}

func doJSON(t *testing.T, method, url string, body any, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
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
		"vars": map[string]any{"serviceUrl": fake.srv.URL},
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
	status, body := doJSON(t, http.MethodPut, base()+"/api/v1/workflows/order", def, nil)
	require.Equal(t, http.StatusCreated, status, body)

	const n = 200
	ids := make([]string, n)
	for i := range n {
		status, body := doJSON(t, http.MethodPost, base()+"/api/v1/workflows/order/executions",
			map[string]any{"input": map[string]any{"order": i}}, nil)
		require.Equal(t, http.StatusCreated, status, body)
		ids[i] = body["id"].(string)
	}

	// Collect the correlated calls, then answer them in random order, some twice.
	var reqs []map[string]any
	deadline := time.After(60 * time.Second)
	for len(reqs) < n {
		select {
		case r := <-fake.reqs:
			reqs = append(reqs, r)
		case <-deadline:
			t.Fatalf("only %d of %d correlated calls arrived", len(reqs), n)
		}
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
				status, body := doJSON(t, http.MethodPost, base()+"/api/internal/callbacks/acme",
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
		`SELECT count(*) FROM execution_wait_states WHERE version <> 2 OR jsonb_array_length(received_events) <> 1 OR status <> 'completed'`).Scan(&badVersions))
	require.Zero(t, badVersions, "each wait records exactly one event and one version bump")

	fake.mu.Lock()
	defer fake.mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, fake.done[id], "continuation of %s ran %d times", id, fake.done[id])
		require.Equal(t, 1, fake.calls[id], "correlated call of %s sent %d times", id, fake.calls[id])
	}
	// The aggregated output reached the continuation.
	status, view := doJSON(t, http.MethodGet, base()+"/api/v1/executions/"+ids[7], nil, nil)
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
func runService(t *testing.T, cfg service.Config) *service.Service {
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
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if cfg.Executor.PollInterval == 0 {
		cfg.Executor.PollInterval = 50 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := service.New(ctx, cfg)
	if err != nil {
		cancel()
		require.NoError(t, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil {
			t.Errorf("replica %s: %v", cfg.InstanceID, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// nextCall waits for the fake service's next correlated call.
func (f *fakeService) nextCall(t *testing.T) map[string]any {
	t.Helper()
	select {
	case r := <-f.reqs:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no correlated call arrived")
		return nil
	}
}

// waitStatus polls an execution until it has the given status.
func waitStatus(t *testing.T, base, id, status string) {
	t.Helper()
	var last map[string]any
	require.Eventually(t, func() bool {
		_, last = doJSON(t, http.MethodGet, base+"/api/v1/executions/"+id, nil, nil)
		return last["status"] == status
	}, 20*time.Second, 20*time.Millisecond, "execution %s never became %s: %v", id, status, last)
}
