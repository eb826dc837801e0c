package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaPipelineFloor is the Kafka path's floor with what this bench's Kafka runs carry
// besides the writes: an embedded broker and a producer on the same cores, and a consumer
// fetching every record. The same records as a Kafka run (one per parked wait, keyed by
// its correlation id, produced as fast as the producer goes) are consumed by a bare
// franz-go consumer group, and each poll's records complete their waits, batch records a
// transaction, workers transactions in flight, addressed by correlation id (the only id
// a record carries). Nothing is decided, decoded or checked. path says what each batch
// sends:
//   - "kafka-pipeline": the Kafka floor's statement (kafkaFloorStmt), the bare writes;
//   - "kafka-pipeline-reads": the Kafka floor with the reads (kafkaReadsFloor), the bare
//     SQL of the path as the service sends it.
//
// No implementation of the Kafka path measured here does less than the first: it pays all
// of this and more. So its rate over the bare-writes floor's (EventFloor) is, within the
// runs' noise, the most of that floor any Kafka run of this bench can reach on this
// machine; the second's is the most a replica that decides from the rows it reads can.
func KafkaPipelineFloor(ctx context.Context, url, path string, partitions, records, batch, workers int) (FloorResult, error) {
	pool, err := parkFloor(ctx, url, records, workers)
	if err != nil {
		return FloorResult{}, err
	}
	defer pool.Close()
	var write floorWrite
	var args func(corrs []uuid.UUID) []any
	switch path {
	case "kafka-pipeline":
		write, args = statement(kafkaFloorStmt("correlation_id")), idsOnly
	case "kafka-pipeline-reads":
		if write, args, err = kafkaReadsFloor(ctx, pool, byCorrelation); err != nil {
			return FloorResult{}, err
		}
	default:
		return FloorResult{}, fmt.Errorf("kafka pipeline floor: unknown path %q", path)
	}
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

	batches := make(chan []uuid.UUID, workers)
	wait := timedWorkers(ctx, pool, workers, func(int) error {
		for b := range batches {
			// The batch's arguments are built here, on the clock, as a replica builds
			// its statements' from the records it polled.
			if err := write.run(ctx, pool, args(b)); err != nil {
				stopPoll()
				// Drain so the poller never blocks on a worker that is gone.
				for range batches {
				}
				return err
			}
		}
		return nil
	})
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
			_, _, _ = wait()
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
	took, cpuSince, err := wait()
	cpu := cpuSince(len(recs))
	if err != nil {
		return FloorResult{}, fmt.Errorf("kafka pipeline floor: %w", err)
	}
	if p := produceErr.Load(); p != nil {
		return FloorResult{}, fmt.Errorf("produce: %w", *p)
	}
	// Every wait addressed is completed: a statement that missed some would make the
	// floor cheaper than the writes it stands for.
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM execution_wait_states WHERE status = 'waiting'`).Scan(&left); err != nil {
		return FloorResult{}, err
	}
	if left > 0 {
		return FloorResult{}, fmt.Errorf("%s floor completed %d of %d waits", path, len(recs)-left, len(recs))
	}
	return FloorResult{Path: path, Events: len(recs), Batch: batch, Workers: workers,
		Seconds: took.Seconds(), PerSecond: float64(len(recs)) / took.Seconds(), CPU: cpu,
		RowsReadPerEvent: float64(write.read.Load()) / float64(len(recs))}, nil
}

// kafkaReadsFloor is the Kafka floor with the reads every decision needs before it
// writes, for the waits parked on pool: a batch's waits read by correlation id (the only
// id a record carries; every column, since the decision is made from the wait's state),
// their executions locked in id order (the continuation advances them in the same
// transaction), the floor's statement (kafkaFloorStmt) by correlation id, and the
// executions' nodes read back as stored (what a continuation advances the graph from,
// with the outcomes of the waits it ended, which it holds) — in one transaction a
// batch, its statements sent in one round trip. Nothing is decided or decoded: the rows
// read are only received. So it is the bare SQL of the Kafka path as the service sends
// it, rows read included: a replica that decides from these rows reaches no more of the
// bare-writes floor than this floor does, however little its own work costs. It returns
// the floor's work and its batches' arguments, given a batch's waits by key: the
// correlation ids, then the executions' ids in order.
func kafkaReadsFloor(ctx context.Context, pool *pgxpool.Pool, key waitKey) (floorWrite, func([]uuid.UUID) []any, error) {
	rows, err := pool.Query(ctx, `SELECT id, execution_id, correlation_id FROM execution_wait_states WHERE status = 'waiting'`)
	if err != nil {
		return floorWrite{}, nil, err
	}
	byKey := map[uuid.UUID]waitIDs{}
	var id uuid.UUID
	var w waitIDs
	if _, err := pgx.ForEachRow(rows, []any{&id, &w.exec, &w.corr}, func() error {
		if key == byCorrelation {
			byKey[w.corr] = w
		} else {
			byKey[id] = w
		}
		return nil
	}); err != nil {
		return floorWrite{}, nil, err
	}
	args := func(waits []uuid.UUID) []any {
		corrs := make([]uuid.UUID, len(waits))
		execs := make([]uuid.UUID, len(waits))
		for i, k := range waits {
			corrs[i], execs[i] = byKey[k].corr, byKey[k].exec
		}
		slices.SortFunc(execs, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
		return []any{corrs, execs}
	}

	write := floorWrite{read: new(atomic.Int64)}
	queue := func(b *pgx.Batch, args []any) {
		corrs, execs := args[0], args[1]
		received := func(rows pgx.Rows) error {
			n := 0
			for rows.Next() {
				n++
			}
			write.read.Add(int64(n))
			return rows.Err()
		}
		b.Queue(`SELECT * FROM execution_wait_states WHERE correlation_id = ANY($1::uuid[])`, corrs).Query(received)
		b.Queue(`SELECT * FROM executions WHERE id = ANY($1::uuid[]) ORDER BY id FOR NO KEY UPDATE`, execs).Query(received)
		b.Queue(kafkaFloorStmt("correlation_id"), corrs)
		b.Queue(`SELECT * FROM node_execution_rows WHERE execution_id = ANY($1::uuid[])`, execs).Query(received)
	}
	write.run = func(ctx context.Context, pool *pgxpool.Pool, args []any) error {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		queue(b, args)
		b.Queue("COMMIT")
		return pool.SendBatch(ctx, b).Close()
	}
	write.inTx = func(ctx context.Context, tx pgx.Tx, args []any) error {
		b := &pgx.Batch{}
		queue(b, args)
		return tx.SendBatch(ctx, b).Close()
	}
	return write, args, nil
}

// waitKey is which id of a wait a floor's batch addresses it by: its own (the floors fed
// from the table) or its correlation id (those fed by records).
type waitKey int

const (
	byWaitID waitKey = iota
	byCorrelation
)
