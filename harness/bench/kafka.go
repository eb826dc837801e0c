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

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/server/auth"
)

// KafkaResult is the Kafka path's figure.
type KafkaResult struct {
	// Tracing: spans recorded for every record (sampled 100%, batched to an exporter
	// that drops them); otherwise the tracer a replica has without an exporter (spans
	// with ids, not recorded). Metrics are on either way.
	Tracing    bool    `json:"tracing"`
	Partitions int     `json:"partitions"`
	Records    int     `json:"records"`
	Seconds    float64 `json:"seconds"`
	// PerSecond is records applied (wait state committed) per second, from the first
	// produce to the last state change.
	PerSecond float64 `json:"per_second"`
	// OtherWaits is how many waiting rows of other executions were in the table (the
	// 1 000 000-row run); 0 otherwise.
	OtherWaits int `json:"other_waits"`
	// ToState is from produce to the wait's change (recorded in the transaction that
	// commits it).
	ToState Latencies `json:"to_state"`
	// ToContinuation is from produce to the continuation (resumed_at, stamped inside its
	// transaction; the latency runs measure to the commit).
	ToContinuation Latencies `json:"to_continuation"`
	// CPU is what the run took per record, from the first produce until every record
	// was applied, when it can be read here. The process's share holds the embedded
	// broker and the producer as well as the replica.
	CPU *CPUUse `json:"cpu,omitempty"`
}

const (
	benchTopic    = "bench.events"
	benchWorkflow = "bench-kafka"
)

// kafkaRig is one replica consuming from an embedded broker, on one schema, with a
// producer for the load generator.
type kafkaRig struct {
	svc      *server.Service
	producer *kgo.Client
	close    func()
}

// startKafka starts an embedded broker with the bench topic and one replica that
// consumes it. Tracing records every span (as a deployment with an exporter does);
// without it the tracer is the one a replica has without an exporter. rec, when not nil,
// also keeps every ended span, and hooks are added to the replica's Kafka client (for the
// latency runs' breakdown; rec needs tracing).
func startKafka(ctx context.Context, url string, partitions int, tracing bool, rec *tracetest.SpanRecorder, hooks []kgo.Hook,
	logger *slog.Logger) (_ *kafkaRig, err error) {
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	tel, err := telemetry.New(ctx, telemetry.Config{ServiceName: "rendezvous-bench", InstanceID: "bench-kafka"})
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	cleanup = append(cleanup, func() { _ = tel.Shutdown(context.Background()) })
	if tracing {
		// What a deployment with an exporter pays: every span sampled, ended spans queued
		// to the batch processor and handed to an exporter (one that drops them).
		opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithBatcher(tracetest.NewNoopExporter())}
		if rec != nil {
			opts = append(opts, sdktrace.WithSpanProcessor(rec))
		}
		tp := sdktrace.NewTracerProvider(opts...)
		cleanup = append(cleanup, func() { _ = tp.Shutdown(context.Background()) })
		tel.TracerProvider = tp
	}
	cluster, err := newBroker(partitions)
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, cluster.Close)

	runCtx, stop := context.WithCancel(ctx)
	svc, err := server.New(runCtx, server.Config{
		// The bench measures the event paths on loopback; authentication is not what it measures.
		Auth:        auth.Config{Insecure: true},
		DatabaseURL: url, HTTPAddr: "127.0.0.1:0", InstanceID: "bench-kafka", DBMaxConns: 32, Logger: logger, Telemetry: tel,
		Kafka:    consumer.Config{Brokers: cluster.ListenAddrs(), TopicRefresh: 100 * time.Millisecond, Hooks: hooks},
		Executor: executor.Config{PollInterval: 100 * time.Millisecond},
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("replica: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = svc.Run(runCtx); close(done) }()
	cleanup = append(cleanup, func() { stop(); <-done })

	def := fmt.Sprintf(`{"name":%q,"nodes":[{"id":"wait","type":"wait_events","data":{
		"kafkaEvent":{"topic":%q},"aggregationStrategy":"all","timeout":3600}}]}`, benchWorkflow, benchTopic)
	if _, err := svc.Exec.PutWorkflow(ctx, benchWorkflow, []byte(def)); err != nil {
		return nil, fmt.Errorf("store workflow: %w", err)
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	cleanup = append(cleanup, producer.Close)
	return &kafkaRig{svc: svc, producer: producer, close: func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}}, nil
}

// newBroker starts an embedded broker on loopback with the bench topic, of partitions
// partitions.
func newBroker(partitions int) (*kfake.Cluster, error) {
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(int32(partitions), benchTopic),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }),
	)
	if err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	return cluster, nil
}

// waitIDs names one parked wait.
type waitIDs struct{ exec, corr uuid.UUID }

// park parks n Kafka-only waits (see parkClones), settles the tables as the floor's are,
// and returns their ids. Only this run's waits are returned, so rows already in the
// table (other runs, the million filler waits) are never addressed.
func (r *kafkaRig) park(ctx context.Context, n int) ([]waitIDs, error) {
	ids, err := parkClones(ctx, r.svc, benchWorkflow, n, false)
	if err != nil {
		return nil, err
	}
	if err := settle(ctx, r.svc.Pool()); err != nil {
		return nil, err
	}
	// The consumer joins its group and is assigned the topic meanwhile; leave it time to
	// finish before any clock starts.
	return ids, sleepCtx(ctx, 500*time.Millisecond)
}

// record is the load generator's record answering w.
func (w waitIDs) record() *kgo.Record {
	value, _ := json.Marshal(map[string]any{"execution_id": w.exec, "correlation_id": w.corr, "status": "done"})
	return &kgo.Record{Topic: benchTopic, Key: w.corr[:], Value: value}
}

// waitApplied waits until the consumer has completed n waits. It asks the consumer's
// own counters rather than the table, so that watching costs the database nothing while
// it is being measured.
func (r *kafkaRig) waitApplied(ctx context.Context, n int) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		got := r.svc.Consumer.Counts()[string(aggregator.Completed)]
		if got >= int64(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d kafka waits completed", got, n)
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// Kafka starts an embedded broker and one replica on the schema at url, parks records
// Kafka-only waits, then produces one record per wait as fast as the producer goes.
// Waits already in the table (see Fill) stay untouched; OtherWaits reports them.
func Kafka(ctx context.Context, url string, partitions, records int, tracing bool, logger *slog.Logger) (KafkaResult, error) {
	rig, err := startKafka(ctx, url, partitions, tracing, nil, nil, logger)
	if err != nil {
		return KafkaResult{}, err
	}
	defer rig.close()
	ids, err := rig.park(ctx, records)
	if err != nil {
		return KafkaResult{}, err
	}
	var others int
	if err := rig.svc.Pool().QueryRow(ctx, `SELECT count(*) FROM execution_wait_states WHERE status = 'waiting'`).Scan(&others); err != nil {
		return KafkaResult{}, err
	}
	others -= len(ids)

	// The records are built before the clock starts: encoding them is the load
	// generator's work, not the replica's, and would otherwise share its cores.
	recs := make([]*kgo.Record, len(ids))
	for i, w := range ids {
		recs[i] = w.record()
	}
	cpuSince := startCPU(ctx, rig.svc.Pool())
	produced := make(map[uuid.UUID]time.Time, len(ids))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var produceErr error
	start := time.Now()
	for i, w := range ids {
		wg.Add(1)
		produced[w.corr] = time.Now()
		rig.producer.Produce(ctx, recs[i], func(_ *kgo.Record, err error) {
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
		return KafkaResult{}, fmt.Errorf("produce: %w", produceErr)
	}
	if err := rig.waitApplied(ctx, len(ids)); err != nil {
		return KafkaResult{}, err
	}
	cpu := cpuSince(len(ids))
	times, err := resumeTimes(ctx, rig.svc, ids)
	if err != nil {
		return KafkaResult{}, err
	}
	var last time.Time
	toState := make([]time.Duration, 0, len(ids))
	toCont := make([]time.Duration, 0, len(ids))
	for corr, t := range times {
		toState = append(toState, t.state.Sub(produced[corr]))
		toCont = append(toCont, t.resumed.Sub(produced[corr]))
		if t.state.After(last) {
			last = t.state
		}
	}
	secs := last.Sub(start).Seconds()
	return KafkaResult{
		Tracing: tracing, Partitions: partitions, Records: len(ids), Seconds: secs, PerSecond: float64(len(ids)) / secs,
		OtherWaits: others, ToState: Summarise(toState), ToContinuation: Summarise(toCont), CPU: cpu,
	}, nil
}

// waitTimes are the moments a wait changed, as stamped inside the transactions that
// changed it: its event applied (updated_at) and its continuation (resumed_at, the same
// moment when the continuation ran in the deciding transaction). Each commit follows
// its stamp by the rest of its transaction.
type waitTimes struct{ state, resumed time.Time }

// resumeTimes waits until every wait of ids has resumed and returns when each changed,
// by correlation id. Until the last resume, it only watches the run queue, which every
// satisfied wait passes through and which stays small, so that watching costs the
// database next to nothing however many rows the wait table holds.
func resumeTimes(ctx context.Context, svc *server.Service, ids []waitIDs) (map[uuid.UUID]waitTimes, error) {
	pool := svc.Pool()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var pending bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run_queue)`).Scan(&pending); err != nil {
			return nil, fmt.Errorf("watch run queue: %w", err)
		}
		if !pending {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("continuations still queued after 3 minutes")
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return nil, err
		}
	}
	execs := make([]uuid.UUID, len(ids))
	for i, w := range ids {
		execs[i] = w.exec
	}
	rows, err := pool.Query(ctx, `SELECT correlation_id, updated_at, resumed_at FROM execution_wait_states
		WHERE execution_id = ANY($1) AND resumed_at IS NOT NULL`, execs)
	if err != nil {
		return nil, fmt.Errorf("read resume times: %w", err)
	}
	defer rows.Close()
	out := make(map[uuid.UUID]waitTimes, len(ids))
	for rows.Next() {
		var corr uuid.UUID
		var t waitTimes
		if err := rows.Scan(&corr, &t.state, &t.resumed); err != nil {
			return nil, err
		}
		out[corr] = t
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != len(ids) {
		return nil, fmt.Errorf("only %d of %d continuations committed", len(out), len(ids))
	}
	return out, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
