// Package consumer is the Kafka intake: a franz-go consumer group, one member per
// replica, that reads the topics of stored wait_events nodes and the events topic, and
// hands each record to the aggregator. It owns reading records (ids, match keys, sent
// events, poison) and committing offsets; what an event does to a wait is the
// aggregator's.
//
// A record on a definition's topic is correlated two ways, both tried: by the
// execution_id and correlation_id it carries (the kafkaEvent's fields, or the default
// ones for the events list), and by payload match — for each Kafka event of the topic
// declaring a match, the value at its left path, looked up among the values open waits
// expect. A record on the events topic (Config.EventsTopic, rendezvous.events by default)
// is an event sent to one execution by type, like POST /api/v1/executions/{id}/events: it
// is delivered to the execution's waits for its type, or buffered until one exists.
//
// Delivery is at-least-once with idempotent apply: an offset is committed only after the
// transaction that applied its record committed; records that cannot be applied now
// (database down, dead-letter write failed) are rewound and their partitions paused, so
// nothing is skipped or committed past. Poison records — and events-topic records that
// can never be an event — go to <topic>.dlq with the reason before their offset is
// committed. It never updates a wait state itself.
//
// The Kafka client is traced and metered by franz-go's kotel plugin; a record's
// traceparent header is honoured as a link from its event's span in the wait's trace.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/startstop"
	"github.com/rendezvous-run/rendezvous/wireformat"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// DeadLetterReason is why a record was not applied but dead-lettered.
type DeadLetterReason string

// The reasons.
const (
	ReasonMissingID DeadLetterReason = "missing_id"
	ReasonInvalidID DeadLetterReason = "invalid_id"
	ReasonPoison    DeadLetterReason = "poison"
)

// Consumer consumes the event topics.
type Consumer struct {
	cfg    Config
	pool   *pgxpool.Pool
	agg    *aggregator.Aggregator
	q      *dbsqlc.Queries
	logger *slog.Logger
	cl     *kgo.Client
	// registry reads values in the schema registry wire format.
	registry *wireformat.Registry

	// loadMu serialises loadTopics, so that a slower read of the definitions never
	// replaces a newer one.
	loadMu  sync.Mutex
	mu      sync.Mutex
	fields  map[string][]idFields             // topic -> id extraction configs
	matches map[string][]aggregator.MatchSpec // topic -> payload-match specs
	// triggers are the triggers of the latest version of each workflow, by topic.
	triggers map[string][]triggerSpec
	// formats are the formats the definitions name for each topic's values (none: auto).
	formats map[string][]workflow.RecordFormat
	topics  map[string]bool
	// loaded is how many definitions were stored when fields and matches were read.
	loaded int64

	refresh chan struct{}
	counts  sync.Map // reason -> *atomic.Int64
	// dbFailing is set while the database cannot be reached to apply records, for
	// readiness (see setHealth).
	dbFailing atomic.Bool
	// firstSeen remembers when a poison record was first seen, across retries.
	firstSeen sync.Map // "topic/partition/offset" -> time.Time
	// lettered holds the offsets of records dead-lettered but not yet handled (their
	// batch failed after the write): a retry does not write them again. An offset
	// leaves once its record is handled, or when its partition goes to another member.
	letteredMu sync.Mutex
	lettered   map[tp]map[int64]bool
	// progress is how far each owned partition is applied, and which are stalled.
	progress *progress
	// dlqTopics provisions the dead-letter topics (see topics.go).
	dlqTopics *dlqProvisioner
	// stopping is closed when Run's context ends: a dead-letter write in progress is
	// given up then (its partition is not committed past it), where the rest of the batch
	// in hand is finished and committed.
	stopping <-chan struct{}

	ins instruments
}

// New builds a Consumer; Run starts it.
func New(pool *pgxpool.Pool, agg *aggregator.Aggregator, cfg Config) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Consumer{
		cfg: cfg, pool: pool, agg: agg, q: dbsqlc.New(), logger: cfg.Logger,
		fields: map[string][]idFields{}, topics: map[string]bool{cfg.EventsTopic: true}, refresh: make(chan struct{}, 1),
		lettered: map[tp]map[int64]bool{}, progress: newProgress(), dlqTopics: newDLQProvisioner(),
	}
	if err := c.initTelemetry(); err != nil {
		return nil, fmt.Errorf("consumer telemetry: %w", err)
	}
	regCfg := cfg.SchemaRegistry
	regCfg.MeterProvider = cfg.MeterProvider
	registry, err := wireformat.New(regCfg)
	if err != nil {
		return nil, err
	}
	c.registry = registry
	opts, err := cfg.clientOpts()
	if err != nil {
		c.registry.Close()
		return nil, err
	}
	opts = append(opts,
		kgo.ConsumerGroup(cfg.Group),
		kgo.SessionTimeout(cfg.SessionTimeout),
		// At least three heartbeats per session, as Kafka advises, and never fewer than
		// the client's default of one every 3 s.
		kgo.HeartbeatInterval(min(3*time.Second, cfg.SessionTimeout/3)),
		// The events topic is known without the database: consumed from the start.
		kgo.ConsumeTopics(cfg.EventsTopic),
		kgo.DisableAutoCommit(),
		// Between a poll and AllowRebalance nothing is revoked, so every record of a
		// poll is applied and committed (or rewound) by the member that polled it.
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
			c.progress.forget(revoked)
			c.forgetPartitions(revoked)
		}),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
			// Another member may own these now: commit nothing for them.
			c.logger.WarnContext(ctx, "kafka partitions lost", "partitions", lost, "instance_id", cfg.ClientID)
			c.progress.forget(lost)
			c.forgetPartitions(lost)
		}),
		// The dead letters this client produces are traced too, under their record's
		// producer's span (see deadLetter).
		kgo.WithHooks(append(c.kotelHooks(), cfg.Hooks...)...),
		kgo.ProducerLinger(0),
		kgo.RecordRetries(5),
		// A dead-letter topic that does not exist fails the write at once (after one
		// metadata refresh, for a topic just created) instead of after the client's
		// default four: the partition backs off and retries, and provisioning is asked to
		// look at the topic again.
		kgo.UnknownTopicRetries(1),
		// A dead letter keeps its record's partition (dead-letter topics are created with
		// the source's partition count), so a partition's poison records stay in order;
		// a dead-letter topic made smaller by hand still takes them, wrapped around.
		kgo.RecordPartitioner(kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
			return func(r *kgo.Record, n int) int { return int(r.Partition) % n }
		})),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		c.registry.Close()
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	c.cl = cl
	return c, nil
}

// Client exposes the Kafka client (tests produce and inspect through it).
func (c *Consumer) Client() *kgo.Client { return c.cl }

// Counts returns how many records ended each way, by outcome or reason.
func (c *Consumer) Counts() map[string]int64 {
	out := map[string]int64{}
	c.counts.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

func (c *Consumer) count(reason string) {
	v, ok := c.counts.Load(reason)
	if !ok {
		// Only a reason's first count allocates its counter.
		v, _ = c.counts.LoadOrStore(reason, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// Stalled lists the partitions this member owns that cannot advance, with the reason
// and since when. A stalled partition leaves readiness alone (another replica would do
// no better with the same record or the same broken dead-letter topic); /readyz names
// it, and rendezvous_kafka_partition_stalled reads 1 for it.
func (c *Consumer) Stalled() []Stall { return c.progress.stalls() }

// Ready reports an error while records cannot be applied or no broker answers.
func (c *Consumer) Ready(ctx context.Context) error {
	if c.dbFailing.Load() {
		return errors.New("applying records fails: the database cannot be reached")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	return nil
}

type tp struct {
	topic     string
	partition int32
}

// Service is Run as a background loop, for the service to start and stop: stopping it
// finishes and commits the batch in hand, then leaves the group.
func (c *Consumer) Service() startstop.Service {
	return startstop.NewLoop("kafka consumer", func(ctx context.Context) { _ = c.Run(ctx) })
}

// Run consumes until ctx ends, then leaves the group and closes the client.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.cl.Close()
	defer c.registry.Close()
	defer func() {
		// A stopped member reports no lag or stall: its partitions are someone else's.
		_ = c.ins.partitionsReg.Unregister()
		c.progress.forget(nil)
	}()
	c.stopping = ctx.Done()
	if err := c.loadTopics(ctx); err != nil {
		c.databaseError(ctx)
		c.logger.WarnContext(ctx, "could not read topics; retrying", "err", err, "instance_id", c.cfg.ClientID)
	}
	go c.refreshLoop(ctx)

	paused := map[tp]time.Time{} // resume after
	// failures counts, per partition, the polls in a row that could not handle it: its
	// backoff grows with them, whatever the other partitions do meanwhile.
	failures := map[tp]int{}
	for ctx.Err() == nil {
		now := time.Now()
		var wake time.Time
		resume := map[string][]int32{}
		for p, at := range paused {
			if !at.After(now) {
				resume[p.topic] = append(resume[p.topic], p.partition)
				delete(paused, p)
			} else if wake.IsZero() || at.Before(wake) {
				wake = at
			}
		}
		if len(resume) > 0 {
			c.cl.ResumeFetchPartitions(resume)
		}
		pollCtx, cancel := ctx, context.CancelFunc(func() {})
		if !wake.IsZero() {
			pollCtx, cancel = context.WithDeadline(ctx, wake)
		}
		fetches := c.cl.PollRecords(pollCtx, c.cfg.MaxPollRecords)
		cancel()
		if fetches.IsClientClosed() || ctx.Err() != nil {
			c.cl.AllowRebalance()
			break
		}
		recs := c.took(ctx, fetches)
		recs = c.widen(ctx, recs)
		if len(recs) == 0 {
			c.cl.AllowRebalance()
			continue
		}
		// A polled batch is finished even if shutdown begins meanwhile, within a bound,
		// so that what was applied is also committed.
		workCtx, cancelWork := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		failed, done := c.process(workCtx, recs)
		cancelWork()
		c.progress.settled(done, failed, time.Now())
		for _, r := range recs {
			if _, ok := failed[tp{r.Topic, r.Partition}]; !ok {
				delete(failures, tp{r.Topic, r.Partition})
			}
		}
		if len(failed) > 0 {
			// Rewind to the first record not handled and pause: the records come back
			// after the backoff, and nothing after them is committed meanwhile.
			rewind := map[string]map[int32]kgo.EpochOffset{}
			pause := map[string][]int32{}
			var longest time.Duration
			for p, h := range failed {
				failures[p]++
				delay := min(c.cfg.BackoffMin<<min(failures[p]-1, 16), c.cfg.BackoffMax)
				longest = max(longest, delay)
				if rewind[p.topic] == nil {
					rewind[p.topic] = map[int32]kgo.EpochOffset{}
				}
				rewind[p.topic][p.partition] = kgo.EpochOffset{Epoch: -1, Offset: h.offset}
				pause[p.topic] = append(pause[p.topic], p.partition)
				paused[p] = time.Now().Add(delay)
			}
			c.cl.PauseFetchPartitions(pause)
			c.cl.SetOffsets(rewind)
			c.logger.WarnContext(ctx, "records not applied; partitions rewound and paused", "partitions", pause, "retry_in", longest, "instance_id", c.cfg.ClientID)
		}
		c.cl.AllowRebalance()
	}
	// Leave the group promptly so the others take over our partitions.
	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.cl.LeaveGroupContext(closeCtx)
	return nil
}

// took logs the fetch errors of a poll, notes its partitions' progress and returns its
// records.
func (c *Consumer) took(ctx context.Context, fetches kgo.Fetches) []*kgo.Record {
	fetches.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			c.logger.WarnContext(ctx, "kafka fetch error", "topic", t, "partition", p, "err", err, "instance_id", c.cfg.ClientID)
		}
	})
	c.progress.fetched(fetches)
	return fetches.Records()
}

// widen adds to a poll's records what is already buffered, without waiting, until they
// span twice as many partitions as there are lanes (so that spreadOverLanes can even
// their loads out) or number 2 × Lanes × MaxPollRecords. The client hands records out
// partition by partition from what a fetch brought, and a fetch brings up to a megabyte
// of each partition: behind a backlog, a poll of MaxPollRecords held one or two
// partitions, and the lanes of the others sat idle while the partitions they would
// apply waited in the buffer. It changes nothing when records arrive as they are
// produced: a poll then takes all there is.
func (c *Consumer) widen(ctx context.Context, recs []*kgo.Record) []*kgo.Record {
	limit := 2 * c.cfg.Lanes * c.cfg.MaxPollRecords
	seen := map[tp]bool{} // the partitions of recs
	for _, r := range recs {
		seen[tp{r.Topic, r.Partition}] = true
	}
	for len(recs) > 0 && len(recs) < limit && len(seen) < 2*c.cfg.Lanes {
		// A nil context takes only what is buffered. Between a poll and AllowRebalance
		// nothing is revoked, for these records as for the first.
		more := c.took(ctx, c.cl.PollRecords(nil, min(c.cfg.MaxPollRecords, limit-len(recs)))) //nolint:staticcheck // nil: do not wait
		if len(more) == 0 {
			break
		}
		for _, r := range more {
			seen[tp{r.Topic, r.Partition}] = true
		}
		recs = append(recs, more...)
	}
	return recs
}

// setHealth updates readiness once per poll, from all its lanes together (lanes that
// reported one by one made it flip within a poll). Readiness goes down only while the
// database cannot be reached, which is when taking the pod out of the Service helps. A
// fault of some records' own (a partition that keeps failing while the others apply)
// holds back its partition and is logged and counted, but leaves readiness alone;
// otherwise it would flip on every poll with or without that partition, and take every
// pod out in turn as the partition moved.
//
// The poll got here by reading the definitions (catchUp), so the database answered it:
// readiness is up unless a lane met an error that says otherwise. Such an error can also
// be one statement's timeout or cancellation (db.IsUnavailable cannot tell), so a ping
// decides.
func (c *Consumer) setHealth(ctx context.Context, unavailable bool) {
	if unavailable {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		unavailable = c.pool.Ping(ctx) != nil
	}
	c.dbFailing.Store(unavailable)
}
