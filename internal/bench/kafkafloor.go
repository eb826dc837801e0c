package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaPipelineFloor is the Kafka path's floor with what this bench's Kafka runs carry
// besides the writes: an embedded broker and a producer on the same cores, and a consumer
// fetching every record. The same records as a Kafka run (one per parked wait, keyed by
// its correlation id, produced as fast as the producer goes) are consumed by a bare
// franz-go consumer group, and each poll's records complete their waits with the Kafka
// floor's statement (kafkaFloorStmt), addressed by correlation id (the only id a record
// carries), batch records a statement, workers statements in flight. Nothing is decided,
// decoded or checked.
//
// No implementation of the Kafka path measured here does less: it pays all of this and
// more. So its rate over the bare-writes floor's (EventFloor) is, within the runs' noise,
// the most of that floor any Kafka run of this bench can reach on this machine.
func KafkaPipelineFloor(ctx context.Context, url string, partitions, records, batch, workers int) (FloorResult, error) {
	pool, err := parkFloor(ctx, url, records, workers)
	if err != nil {
		return FloorResult{}, err
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT execution_id, correlation_id FROM execution_wait_states WHERE status = 'waiting'`)
	if err != nil {
		return FloorResult{}, err
	}
	ids, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (w waitIDs, err error) {
		return w, row.Scan(&w.exec, &w.corr)
	})
	if err != nil {
		return FloorResult{}, err
	}
	// The records are the Kafka runs' records, built before the clock starts as theirs are.
	recs := make([]*kgo.Record, len(ids))
	for i, w := range ids {
		recs[i] = w.record()
	}

	cluster, err := newBroker(partitions)
	if err != nil {
		return FloorResult{}, err
	}
	defer cluster.Close()
	assigned := make(chan struct{})
	var once sync.Once
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumerGroup("bench-floor"), kgo.ConsumeTopics(benchTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { once.Do(func() { close(assigned) }) }))
	if err != nil {
		return FloorResult{}, fmt.Errorf("consumer: %w", err)
	}
	defer consumer.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		return FloorResult{}, fmt.Errorf("producer: %w", err)
	}
	defer producer.Close()

	// The group is joined and the topic assigned before the clock starts, as the Kafka
	// runs' replica is. Polling is what joins; nothing is produced yet, so each poll ends
	// empty at its timeout.
	joinBy := time.Now().Add(30 * time.Second)
	for joined := false; !joined; {
		select {
		case <-assigned:
			joined = true
		default:
			if time.Now().After(joinBy) {
				return FloorResult{}, errors.New("consumer not assigned the topic within 30 s")
			}
			joinCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			consumer.PollRecords(joinCtx, 1)
			cancel()
			if err := ctx.Err(); err != nil {
				return FloorResult{}, err
			}
		}
	}
	if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
		return FloorResult{}, err
	}
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()

	stmt := kafkaFloorStmt("correlation_id")
	batches := make(chan []uuid.UUID, workers)
	var written atomic.Int64
	errs := make([]error, workers)
	var wg sync.WaitGroup
	cpuSince := startCPU(ctx, pool)
	start := time.Now()
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				tag, err := pool.Exec(ctx, stmt, b)
				if err != nil {
					errs[i] = err
					stopPoll()
					// Drain so the poller never blocks on a worker that is gone.
					for range batches {
					}
					return
				}
				written.Add(tag.RowsAffected())
			}
		}()
	}
	var produceErr atomic.Pointer[error]
	for _, r := range recs {
		producer.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				produceErr.CompareAndSwap(nil, &err)
				stopPoll() // the record will never be fetched: stop waiting for it
			}
		})
	}
	// One poller, as a replica has: each poll's records, batch at most a statement.
	consumed := 0
	for consumed < len(recs) && pollCtx.Err() == nil {
		fetches := consumer.PollRecords(pollCtx, batch)
		if err := fetches.Err0(); err != nil && !errors.Is(err, context.Canceled) {
			stopPoll()
			close(batches)
			wg.Wait()
			return FloorResult{}, fmt.Errorf("poll: %w", err)
		}
		got := fetches.Records()
		if len(got) == 0 {
			continue
		}
		keys := make([]uuid.UUID, len(got))
		for i, r := range got {
			keys[i] = uuid.UUID(r.Key)
		}
		consumed += len(got)
		batches <- keys
	}
	close(batches)
	wg.Wait()
	took := time.Since(start)
	cpu := cpuSince(len(recs))
	if err := errors.Join(errs...); err != nil {
		return FloorResult{}, fmt.Errorf("kafka pipeline floor: %w", err)
	}
	if p := produceErr.Load(); p != nil {
		return FloorResult{}, fmt.Errorf("produce: %w", *p)
	}
	if n := written.Load(); n != int64(len(recs)) {
		return FloorResult{}, fmt.Errorf("kafka pipeline floor completed %d of %d waits", n, len(recs))
	}
	return FloorResult{Path: "kafka-pipeline", Events: len(recs), Batch: batch, Workers: workers,
		Seconds: took.Seconds(), PerSecond: float64(len(recs)) / took.Seconds(), CPU: cpu}, nil
}
