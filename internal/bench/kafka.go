package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/internal/service"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
)

// KafkaResult is the Kafka path's figure.
type KafkaResult struct {
	// Tracing: spans recorded for every record (sampled 100%, batched to an exporter
	// that drops them); otherwise a no-op tracer. Metrics are on either way.
	Tracing    bool    `json:"tracing"`
	Partitions int     `json:"partitions"`
	Records    int     `json:"records"`
	Seconds    float64 `json:"seconds"`
	// PerSecond is records applied (wait state committed) per second, from the first
	// produce to the last state change.
	PerSecond float64 `json:"per_second"`
	// ToState is from produce to the wait's change (recorded in the transaction that
	// commits it).
	ToState Latencies `json:"to_state"`
	// ToContinuation is from produce to the continuation committed.
	ToContinuation Latencies `json:"to_continuation"`
}

const benchTopic = "bench.events"

// Kafka starts an embedded broker and one replica on the schema at url, parks records
// Kafka-only waits, then produces one record per wait as fast as the producer goes.
func Kafka(ctx context.Context, url string, partitions, records int, tracing bool, logger *slog.Logger) (KafkaResult, error) {
	tel, err := telemetry.New(ctx, telemetry.Config{ServiceName: "rendezvous-bench", InstanceID: "bench-kafka"})
	if err != nil {
		return KafkaResult{}, err
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	if tracing {
		// What a deployment with an exporter pays: every span sampled, ended spans queued
		// to the batch processor and handed to an exporter (one that drops them).
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		tel.TracerProvider = tp
	} else {
		tel.TracerProvider = tracenoop.NewTracerProvider()
	}
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(int32(partitions), benchTopic),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }),
	)
	if err != nil {
		return KafkaResult{}, err
	}
	defer cluster.Close()

	runCtx, stop := context.WithCancel(ctx)
	svc, err := service.New(runCtx, service.Config{
		DatabaseURL: url, HTTPAddr: "127.0.0.1:0", InstanceID: "bench-kafka", DBMaxConns: 32, Logger: logger, Telemetry: tel,
		Kafka:    consumer.Config{Brokers: cluster.ListenAddrs(), TopicRefresh: 100 * time.Millisecond},
		Executor: executor.Config{PollInterval: 100 * time.Millisecond},
	})
	if err != nil {
		stop()
		return KafkaResult{}, err
	}
	done := make(chan struct{})
	go func() { _ = svc.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()

	def := fmt.Sprintf(`{"name":"bench-kafka","nodes":[{"id":"wait","type":"wait_events","data":{
		"kafkaEvent":{"topic":%q},"aggregationStrategy":"all","timeout":3600}}]}`, benchTopic)
	if _, err := svc.Exec.PutWorkflow(ctx, "bench-kafka", []byte(def)); err != nil {
		return KafkaResult{}, err
	}
	if err := parkWaits(ctx, svc, "bench-kafka", records, 8); err != nil {
		return KafkaResult{}, err
	}
	type pair struct{ exec, corr uuid.UUID }
	var pairs []pair
	rows, err := svc.Pool().Query(ctx, `SELECT execution_id, correlation_id FROM execution_wait_states WHERE status = 'waiting'`)
	if err != nil {
		return KafkaResult{}, err
	}
	for rows.Next() {
		var p pair
		if err := rows.Scan(&p.exec, &p.corr); err != nil {
			return KafkaResult{}, err
		}
		pairs = append(pairs, p)
	}
	if err := rows.Err(); err != nil {
		return KafkaResult{}, err
	}
	// Let the consumer join and be assigned before the clock starts.
	time.Sleep(500 * time.Millisecond)

	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		return KafkaResult{}, err
	}
	defer producer.Close()
	produced := make(map[uuid.UUID]time.Time, len(pairs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var produceErr error
	start := time.Now()
	for _, p := range pairs {
		value, _ := json.Marshal(map[string]any{"execution_id": p.exec, "correlation_id": p.corr, "status": "done"})
		wg.Add(1)
		mu.Lock()
		produced[p.corr] = time.Now()
		mu.Unlock()
		producer.Produce(ctx, &kgo.Record{Topic: benchTopic, Key: p.corr[:], Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				produceErr = err
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if produceErr != nil {
		return KafkaResult{}, produceErr
	}
	pool := svc.Pool()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM execution_wait_states WHERE status = 'completed'`).Scan(&n); err != nil {
			return KafkaResult{}, err
		}
		if n == len(pairs) {
			break
		}
		if time.Now().After(deadline) {
			return KafkaResult{}, fmt.Errorf("only %d of %d kafka waits completed", n, len(pairs))
		}
		time.Sleep(20 * time.Millisecond)
	}
	var last time.Time
	toState := make([]time.Duration, 0, len(pairs))
	rows, err = pool.Query(ctx, `SELECT correlation_id, updated_at FROM execution_wait_states`)
	if err != nil {
		return KafkaResult{}, err
	}
	for rows.Next() {
		var corr uuid.UUID
		var at time.Time
		if err := rows.Scan(&corr, &at); err != nil {
			return KafkaResult{}, err
		}
		toState = append(toState, at.Sub(produced[corr]))
		if at.After(last) {
			last = at
		}
	}
	if err := rows.Err(); err != nil {
		return KafkaResult{}, err
	}
	toCont, err := waitContinuations(ctx, svc, produced)
	if err != nil {
		return KafkaResult{}, err
	}
	secs := last.Sub(start).Seconds()
	return KafkaResult{
		Tracing: tracing, Partitions: partitions, Records: len(pairs), Seconds: secs, PerSecond: float64(len(pairs)) / secs,
		ToState: Summarise(toState), ToContinuation: Summarise(toCont),
	}, nil
}

// parkWaits starts n executions of a one-node workflow and waits until each waits.
func parkWaits(ctx context.Context, svc *service.Service, name string, n, concurrency int) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, concurrency)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := svc.Exec.StartExecution(ctx, name, nil); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var waiting int
		if err := svc.Pool().QueryRow(ctx, `SELECT count(*) FROM execution_wait_states WHERE status = 'waiting'`).Scan(&waiting); err != nil {
			return err
		}
		if waiting >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d waits parked", waiting, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitContinuations waits for every continuation and returns, per wait, the time from
// its event's start to resumed_at.
func waitContinuations(ctx context.Context, svc *service.Service, started map[uuid.UUID]time.Time) ([]time.Duration, error) {
	pool := svc.Pool()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM execution_wait_states WHERE resumed_at IS NOT NULL`).Scan(&n); err != nil {
			return nil, err
		}
		if n >= len(started) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d continuations committed", n, len(started))
		}
		time.Sleep(20 * time.Millisecond)
	}
	rows, err := pool.Query(ctx, `SELECT correlation_id, resumed_at FROM execution_wait_states WHERE resumed_at IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []time.Duration
	for rows.Next() {
		var corr uuid.UUID
		var at time.Time
		if err := rows.Scan(&corr, &at); err != nil {
			return nil, err
		}
		if t0, ok := started[corr]; ok {
			out = append(out, at.Sub(t0))
		}
	}
	return out, rows.Err()
}
