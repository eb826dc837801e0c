package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rendezvous-run/rendezvous/callbacks"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/outbound"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/server/auth"
)

// CallbackResult is the callback path's figure.
type CallbackResult struct {
	Concurrency int     `json:"concurrency"`
	Waits       int     `json:"waits"`
	Seconds     float64 `json:"seconds"`
	// PerSecond is callbacks correlated (answered 202) per second.
	PerSecond float64 `json:"per_second"`
	// ResumedPerSecond counts waits whose continuation committed, from the first
	// callback to the last continuation.
	ResumedPerSecond float64 `json:"resumed_per_second"`
	// ToContinuation is from sending a callback to its continuation (resumed_at, stamped
	// inside its transaction), for every wait.
	ToContinuation Latencies `json:"to_continuation"`
	// Response is the callback's HTTP round trip.
	Response Latencies `json:"response"`
	// RoundTripsPerCallback is the replica's round trips to PostgreSQL (statements, or
	// pipelined batches of them, each waited for) while the callbacks were answered, per
	// callback; its background loops count too.
	RoundTripsPerCallback float64 `json:"round_trips_per_callback"`
	// StatementsPerCallback is the statements the replica ran on PostgreSQL in the same
	// time, per callback: a round trip can carry several.
	StatementsPerCallback float64 `json:"statements_per_callback"`
}

const callbackWorkflow = "bench"

// callbackRig is one replica serving callbacks on one schema, and the fake external
// service its waits call.
type callbackRig struct {
	svc      *server.Service
	endpoint string
	close    func()
}

// startCallbacks starts the fake service, which accepts every call, and one replica
// with the API-only workflow.
func startCallbacks(ctx context.Context, url string, logger *slog.Logger) (*callbackRig, error) {
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))

	runCtx, stop := context.WithCancel(ctx)
	svc, err := server.New(runCtx, server.Config{
		// The bench measures the event paths on loopback; authentication is not what it measures.
		Auth:        auth.Config{Insecure: true},
		DatabaseURL: url, HTTPAddr: "127.0.0.1:0", InstanceID: "bench", DBMaxConns: 32, Logger: logger,
		// The stand-in for the external service listens on loopback.
		Executor: executor.Config{Outbound: outbound.ClientConfig{Allow: []string{"127.0.0.1"}}},
		// Every callback comes from this one process: what is measured is the path, not
		// the limits a flood from one address meets.
		Callbacks: callbacks.Config{RatePerSource: -1, RatePerExecution: -1},
	})
	if err != nil {
		stop()
		fake.Close()
		return nil, fmt.Errorf("replica: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = svc.Run(runCtx); close(done) }()
	rig := &callbackRig{svc: svc, endpoint: "http://" + svc.Addr() + "/api/internal/callbacks/bench",
		close: func() { stop(); <-done; fake.Close() }}

	def := fmt.Sprintf(`{"name":%q,"nodes":[{"id":"wait","type":"wait_events","data":{
		"apiCall":{"url":%q},"aggregationStrategy":"all","timeout":3600}}]}`, callbackWorkflow, fake.URL+"/process")
	if _, err := svc.Exec.PutWorkflow(ctx, callbackWorkflow, []byte(def)); err != nil {
		rig.close()
		return nil, fmt.Errorf("store workflow: %w", err)
	}
	return rig, nil
}

// park parks n API-only waits (see parkClones), settles the tables as the floor's are,
// and returns their ids. The template's call reaches the fake service, which accepts
// it; the clones' calls count as already sent, as after the outbox delivered them.
func (r *callbackRig) park(ctx context.Context, n int) ([]waitIDs, error) {
	ids, err := parkClones(ctx, r.svc, callbackWorkflow, n, false)
	if err != nil {
		return nil, err
	}
	return ids, settle(ctx, r.svc.Pool())
}

// send posts w's callback and checks that it was correlated.
func (r *callbackRig) send(client *http.Client, w waitIDs) error {
	body, _ := json.Marshal(map[string]any{"execution_id": w.exec, "correlation_id": w.corr, "result": "ok"})
	resp, err := client.Post(r.endpoint, "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("callback: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("callback answered %d", resp.StatusCode)
	}
	return nil
}

// Callbacks starts one in-process replica on the schema at url, parks waits API-only
// waits whose correlated call goes to a local fake service, then answers them with
// concurrency clients over loopback HTTP, as fast as they go.
func Callbacks(ctx context.Context, url string, concurrency, waits int, logger *slog.Logger) (CallbackResult, error) {
	// The replica reaches PostgreSQL through a counter of its round trips.
	u, err := neturl.Parse(url)
	if err != nil {
		return CallbackResult{}, fmt.Errorf("database url: %w", err)
	}
	counter, err := newRoundTripCounter(u.Host)
	if err != nil {
		return CallbackResult{}, err
	}
	defer counter.close()
	counted, err := counter.url(url)
	if err != nil {
		return CallbackResult{}, err
	}
	rig, err := startCallbacks(ctx, counted, logger)
	if err != nil {
		return CallbackResult{}, err
	}
	defer rig.close()
	pending, err := rig.park(ctx, waits)
	if err != nil {
		return CallbackResult{}, err
	}

	// Measured: answer every wait.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency}}
	defer client.CloseIdleConnections()
	sent := make([]time.Time, waits)
	resp := make([]time.Duration, waits)
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	collectGarbage()
	tripsBefore, statementsBefore := counter.count(), counter.statementCount()
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= waits {
					return
				}
				sent[i] = time.Now()
				if err := rig.send(client, pending[i]); err != nil {
					failed.Store(err)
					return
				}
				resp[i] = time.Since(sent[i])
			}
		}()
	}
	wg.Wait()
	answered := time.Since(start)
	// Each answer came after its continuation committed, in the callback's transaction
	// (or its resume row did, for a worker to claim: those count from here on only as far
	// as they ran by now).
	trips, statements := counter.count()-tripsBefore, counter.statementCount()-statementsBefore
	if err, _ := failed.Load().(error); err != nil {
		return CallbackResult{}, err
	}
	times, err := resumeTimes(ctx, rig.svc, pending)
	if err != nil {
		return CallbackResult{}, err
	}
	var last time.Time
	toCont := make([]time.Duration, 0, waits)
	for i, w := range pending {
		t := times[w.corr]
		toCont = append(toCont, t.resumed.Sub(sent[i]))
		if t.resumed.After(last) {
			last = t.resumed
		}
	}
	return CallbackResult{
		Concurrency: concurrency, Waits: waits, Seconds: answered.Seconds(),
		PerSecond:        float64(waits) / answered.Seconds(),
		ResumedPerSecond: float64(waits) / last.Sub(start).Seconds(),
		ToContinuation:   Summarise(toCont),
		Response:         Summarise(resp),

		RoundTripsPerCallback: float64(trips) / float64(waits),
		StatementsPerCallback: float64(statements) / float64(waits),
	}, nil
}
