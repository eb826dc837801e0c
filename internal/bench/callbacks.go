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
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/rendezvous-run/rendezvous/internal/service"
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
	// ToContinuation is from sending a callback to its continuation committed
	// (resumed_at), for every wait.
	ToContinuation Latencies `json:"to_continuation"`
	// Response is the callback's HTTP round trip.
	Response Latencies `json:"response"`
}

type pendingWait struct{ exec, corr string }

// Callbacks starts one in-process replica on the schema at url, parks waits api-only
// wait_events nodes whose correlated call goes to a local fake service, then answers
// them with concurrency clients over loopback HTTP.
func Callbacks(ctx context.Context, url string, concurrency, waits int, logger *slog.Logger) (CallbackResult, error) {
	calls := make(chan pendingWait, waits)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		calls <- pendingWait{exec: fmt.Sprint(body["execution_id"]), corr: fmt.Sprint(body["correlation_id"])}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer fake.Close()

	runCtx, stop := context.WithCancel(ctx)
	svc, err := service.New(runCtx, service.Config{
		DatabaseURL: url, HTTPAddr: "127.0.0.1:0", InstanceID: "bench", DBMaxConns: 32, Logger: logger,
	})
	if err != nil {
		stop()
		return CallbackResult{}, err
	}
	done := make(chan struct{})
	go func() { _ = svc.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()

	def := fmt.Sprintf(`{"name":"bench","nodes":[{"id":"wait","type":"wait_events","data":{
		"apiCall":{"url":%q},"aggregationStrategy":"all","timeout":3600}}]}`, fake.URL+"/process")
	if _, err := svc.Exec.PutWorkflow(ctx, "bench", []byte(def)); err != nil {
		return CallbackResult{}, err
	}
	// Park the waits (not measured).
	var startErr atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, concurrency)
	for range waits {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := svc.Exec.StartExecution(ctx, "bench", nil); err != nil {
				startErr.Store(err)
			}
		}()
	}
	wg.Wait()
	if err, _ := startErr.Load().(error); err != nil {
		return CallbackResult{}, err
	}
	pending := make([]pendingWait, 0, waits)
	timeout := time.After(2 * time.Minute)
	for len(pending) < waits {
		select {
		case p := <-calls:
			pending = append(pending, p)
		case <-timeout:
			return CallbackResult{}, fmt.Errorf("only %d of %d waits parked", len(pending), waits)
		}
	}

	// Measured: answer every wait.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency}}
	endpoint := "http://" + svc.Addr() + "/api/internal/callbacks/bench"
	sent := make([]time.Time, waits)
	resp := make([]time.Duration, waits)
	var next atomic.Int64
	var failed atomic.Value
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
				body, _ := json.Marshal(map[string]any{"execution_id": pending[i].exec, "correlation_id": pending[i].corr, "result": "ok"})
				sent[i] = time.Now()
				r, err := client.Post(endpoint, "application/json", bytes.NewReader(body))
				if err != nil {
					failed.Store(err)
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
				resp[i] = time.Since(sent[i])
				if r.StatusCode != http.StatusAccepted {
					failed.Store(fmt.Errorf("callback answered %d", r.StatusCode))
					return
				}
			}
		}()
	}
	wg.Wait()
	answered := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		return CallbackResult{}, err
	}
	sentAt := make(map[uuid.UUID]time.Time, waits)
	for i, p := range pending {
		sentAt[uuid.MustParse(p.corr)] = sent[i]
	}
	toCont, err := waitContinuations(ctx, svc, sentAt)
	if err != nil {
		return CallbackResult{}, err
	}
	var last time.Time
	if err := svc.Pool().QueryRow(ctx, `SELECT max(resumed_at) FROM execution_wait_states`).Scan(&last); err != nil {
		return CallbackResult{}, err
	}
	return CallbackResult{
		Concurrency: concurrency, Waits: waits, Seconds: answered.Seconds(),
		PerSecond:        float64(waits) / answered.Seconds(),
		ResumedPerSecond: float64(waits) / last.Sub(start).Seconds(),
		ToContinuation:   Summarise(toCont),
		Response:         Summarise(resp),
	}, nil
}
