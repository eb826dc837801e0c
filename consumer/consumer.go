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
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/dotpath"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/internal/workflow"
)

// Reasons a record was not applied (besides being applied: "recorded", "completed").
const (
	ReasonMissingID = "missing_id"
	ReasonInvalidID = "invalid_id"
	ReasonPoison    = "poison"
)

// Dead-letter headers.
const (
	HeaderReason    = "rendezvous-dlq-reason"
	HeaderTopic     = "rendezvous-dlq-topic"
	HeaderPartition = "rendezvous-dlq-partition"
	HeaderOffset    = "rendezvous-dlq-offset"
	HeaderFirstSeen = "rendezvous-dlq-first-seen"
)

// idFields is one way a topic's records carry their ids.
type idFields struct{ exec, corr string }

// Consumer consumes the event topics.
type Consumer struct {
	cfg    Config
	pool   *pgxpool.Pool
	agg    *aggregator.Aggregator
	q      *dbsqlc.Queries
	logger *slog.Logger
	cl     *kgo.Client

	// loadMu serialises loadTopics, so that a slower read of the definitions never
	// replaces a newer one.
	loadMu  sync.Mutex
	mu      sync.Mutex
	fields  map[string][]idFields             // topic -> id extraction configs
	matches map[string][]aggregator.MatchSpec // topic -> payload-match specs
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
		lettered: map[tp]map[int64]bool{},
	}
	if err := c.initTelemetry(); err != nil {
		return nil, fmt.Errorf("consumer telemetry: %w", err)
	}
	opts, err := cfg.clientOpts()
	if err != nil {
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
			c.forgetLag(revoked)
			c.forgetPartitions(revoked)
		}),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
			// Another member may own these now: commit nothing for them.
			c.logger.WarnContext(ctx, "kafka partitions lost", "partitions", lost, "instance_id", cfg.ClientID)
			c.forgetLag(lost)
			c.forgetPartitions(lost)
		}),
		// The dead letters this client produces are traced too, under their record's
		// receive span (see deadLetter).
		kgo.WithHooks(c.kotelHooks()...),
		kgo.ProducerLinger(0),
		kgo.RecordRetries(5),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	c.cl = cl
	return c, nil
}

// Client exposes the Kafka client (tests produce and inspect through it).
func (c *Consumer) Client() *kgo.Client { return c.cl }

// Refresh asks Run to re-read the topics of stored definitions now (called after a
// definition is stored on this replica).
func (c *Consumer) Refresh() {
	select {
	case c.refresh <- struct{}{}:
	default:
	}
}

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
	v, _ := c.counts.LoadOrStore(reason, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

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

// loadTopics reads the Kafka events of stored definitions — kafkaEvent blocks and the
// events lists' Kafka events — and subscribes to any new topic.
func (c *Consumer) loadTopics(ctx context.Context) error {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	// Counted before reading: a definition stored in between is read, and only makes the
	// next comparison ask for one more read.
	count, err := c.q.WorkflowCount(ctx, c.pool)
	var rows, named []json.RawMessage
	if err == nil {
		rows, err = c.q.WorkflowKafkaEventConfigs(ctx, c.pool)
	}
	if err == nil {
		named, err = c.q.WorkflowKafkaNamedEvents(ctx, c.pool)
	}
	if err != nil {
		return fmt.Errorf("load kafka topics: %w", err)
	}
	fields := map[string][]idFields{}
	addFields := func(topic string, f idFields) {
		if !slices.Contains(fields[topic], f) {
			fields[topic] = append(fields[topic], f)
		}
	}
	defaults := idFields{exec: workflow.DefaultExecutionIDField, corr: workflow.DefaultCorrelationIDField}
	for _, raw := range rows {
		// Parsed by the definition parser itself, so defaults are the same as the node's.
		cfg, errs := workflow.ParseWaitEventsNode(json.RawMessage(`{"kafkaEvent":`+string(raw)+`}`), "")
		if len(errs) > 0 {
			continue
		}
		ke := cfg.(*workflow.WaitEvents).KafkaEvent
		if ke == nil {
			continue
		}
		addFields(ke.Topic, idFields{exec: ke.ExecutionIDField, corr: ke.CorrelationIDField})
	}
	matches := map[string][]aggregator.MatchSpec{}
	for _, raw := range named {
		cfg, errs := workflow.ParseWaitEventsNode(json.RawMessage(`{"events":[`+string(raw)+`]}`), "")
		if len(errs) > 0 {
			continue
		}
		for _, e := range cfg.(*workflow.WaitEvents).Events {
			if e.Source != workflow.SourceKafka {
				continue
			}
			if e.Match == nil {
				// Named Kafka events are correlated by the default id fields.
				addFields(e.Topic, defaults)
				continue
			}
			spec := aggregator.MatchSpec{Type: e.Type, Left: e.Match.Left}
			if !slices.Contains(matches[e.Topic], spec) {
				matches[e.Topic] = append(matches[e.Topic], spec)
			}
		}
	}
	for _, t := range c.cfg.Topics {
		if len(fields[t]) == 0 {
			fields[t] = []idFields{defaults}
		}
	}
	c.mu.Lock()
	// Set before subscribing: the first record of a new topic is read with its configs.
	c.fields, c.matches, c.loaded = fields, matches, count
	var added []string
	for _, t := range slices.Concat(slices.Collect(maps.Keys(fields)), slices.Collect(maps.Keys(matches))) {
		if !c.topics[t] {
			c.topics[t] = true
			added = append(added, t)
		}
	}
	c.mu.Unlock()
	if len(added) > 0 {
		slices.Sort(added)
		c.cl.AddConsumeTopics(added...)
		c.logger.InfoContext(ctx, "consuming kafka topics", "added", added, "instance_id", c.cfg.ClientID)
	}
	return nil
}

// catchUp re-reads the stored definitions when one was stored since the last read. It
// runs before a poll's records are decoded: a record answering a wait whose definition
// is new — ids at other fields, a payload match — on a topic already consumed would
// otherwise be decoded without it until the periodic refresh, and skipped, or applied
// to its id wait but not to the new match. Its wait exists, so its definition was
// stored before the record could be produced, and one count, read after the poll, tells
// whether this replica has read it.
func (c *Consumer) catchUp(ctx context.Context) error {
	count, err := c.q.WorkflowCount(ctx, c.pool)
	if err != nil {
		return fmt.Errorf("count definitions: %w", err)
	}
	c.mu.Lock()
	current := count == c.loaded
	c.mu.Unlock()
	if current {
		return nil
	}
	return c.loadTopics(ctx)
}

// fieldsFor returns how records of topic carry their ids: the configured fields, else
// the default ones.
func (c *Consumer) fieldsFor(topic string) []idFields {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.fields[topic]; len(f) > 0 {
		return f
	}
	return []idFields{{exec: workflow.DefaultExecutionIDField, corr: workflow.DefaultCorrelationIDField}}
}

// matchSpecsFor returns the payload-match specs of topic's Kafka events (none for most
// topics).
func (c *Consumer) matchSpecsFor(topic string) []aggregator.MatchSpec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.matches[topic]
}

type tp struct {
	topic     string
	partition int32
}

// Run consumes until ctx ends, then leaves the group and closes the client.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.cl.Close()
	defer func() {
		// A stopped member reports no lag: its partitions are someone else's.
		_ = c.ins.lagReg.Unregister()
		c.forgetLag(nil)
	}()
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
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				c.logger.WarnContext(ctx, "kafka fetch error", "topic", t, "partition", p, "err", err, "instance_id", c.cfg.ClientID)
			}
		})
		c.observeLag(fetches)
		recs := fetches.Records()
		if len(recs) == 0 {
			c.cl.AllowRebalance()
			continue
		}
		// A polled batch is finished even if shutdown begins meanwhile, within a bound,
		// so that what was applied is also committed.
		workCtx, cancelWork := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		failed := c.process(workCtx, recs)
		cancelWork()
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
			for p, off := range failed {
				failures[p]++
				delay := min(c.cfg.BackoffMin<<min(failures[p]-1, 16), c.cfg.BackoffMax)
				longest = max(longest, delay)
				if rewind[p.topic] == nil {
					rewind[p.topic] = map[int32]kgo.EpochOffset{}
				}
				rewind[p.topic][p.partition] = kgo.EpochOffset{Epoch: -1, Offset: off}
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

func (c *Consumer) refreshLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.TopicRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.refresh:
		}
		if err := c.loadTopics(ctx); err != nil {
			if ctx.Err() == nil {
				c.databaseError(ctx)
				c.logger.WarnContext(ctx, "could not refresh topics", "err", err, "instance_id", c.cfg.ClientID)
			}
		} else {
			// The database answered: a member left without records to apply (its
			// partitions went to others during an outage) must not stay unready.
			c.dbFailing.Store(false)
		}
	}
}

// item is one record on its way through a batch.
type item struct {
	rec *kgo.Record
	// poison is the dead-letter reason (free text, for the header); poisonCategory is
	// its category (poisonTooLarge…, for the metric).
	poison         string
	poisonCategory string
	// skip is why a record without usable ids is not applied; it is counted once the
	// record is handled, not on every retry of its batch.
	skip string
	// events are the record's candidate events: one per pair of ids it carries, and one
	// correlated by payload match when it holds a value of a match. A poison record's are
	// not applied, they only name the wait in log lines.
	events []aggregator.Event
	// sent is the event a valid record of the events topic sends to its execution.
	sent *aggregator.Sent
}

// process applies a poll's records in batches and commits what was handled. It returns,
// per partition that could not be fully handled, the offset to resume from.
func (c *Consumer) process(ctx context.Context, recs []*kgo.Record) map[tp]int64 {
	if err := c.catchUp(ctx); err != nil {
		// Decoding with definitions that may be stale could skip a record: the whole
		// poll comes back instead.
		c.databaseError(ctx)
		c.dbFailing.Store(true)
		c.logger.ErrorContext(ctx, "reading definitions failed", "err", err, "records", len(recs), "instance_id", c.cfg.ClientID)
		failed := map[tp]int64{}
		for _, r := range recs {
			if _, ok := failed[tp{r.Topic, r.Partition}]; !ok {
				failed[tp{r.Topic, r.Partition}] = r.Offset // a partition's records come in order
			}
		}
		return failed
	}
	// Partitions are spread over lanes applied side by side, each on its own
	// connection; a partition stays in one lane, so its order is kept.
	lanes := make([][]*kgo.Record, c.cfg.Lanes)
	laneOf := map[tp]int{}
	for _, r := range recs {
		p := tp{r.Topic, r.Partition}
		l, ok := laneOf[p]
		if !ok {
			l = len(laneOf) % c.cfg.Lanes
			laneOf[p] = l
		}
		lanes[l] = append(lanes[l], r)
	}
	type laneResult struct {
		failed      map[tp]int64
		done        map[tp]*kgo.Record
		unavailable bool
	}
	results := make([]laneResult, len(lanes))
	var wg sync.WaitGroup
	for i, lane := range lanes {
		if len(lane) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].failed, results[i].done, results[i].unavailable = c.processLane(ctx, lane)
		}()
	}
	wg.Wait()

	failed := map[tp]int64{}
	var commit []*kgo.Record
	unavailable := false
	for _, r := range results {
		unavailable = unavailable || r.unavailable
		maps.Copy(failed, r.failed)
		for _, rec := range r.done {
			commit = append(commit, rec)
		}
	}
	if len(commit) > 0 {
		if err := c.cl.CommitRecords(ctx, commit...); err != nil {
			// The records are applied; redelivery after a rebalance or restart is absorbed
			// as duplicates.
			c.logger.WarnContext(ctx, "offset commit failed", "err", err, "instance_id", c.cfg.ClientID)
		}
	}
	c.setHealth(ctx, unavailable)
	return failed
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

// processLane applies one lane's records in batches. It returns, per partition, the
// offset to resume from when not everything could be handled, and the last record
// handled.
//
// A batch's poison records are dead-lettered before anything is applied: when a
// dead-letter write fails, the records after it on its partition have not been applied
// either, and come back with it, applied once. Dead letters written for a batch that
// then fails are remembered (c.lettered), so its retry does not write them again.
//
// unavailable reports that applying met an error saying the database could not be
// reached (see setHealth).
func (c *Consumer) processLane(ctx context.Context, recs []*kgo.Record) (failed map[tp]int64, done map[tp]*kgo.Record, unavailable bool) {
	failed = map[tp]int64{}
	done = map[tp]*kgo.Record{}
	// stop holds back r's partition from r on; held reports whether r is held back.
	stop := func(r *kgo.Record) {
		p := tp{r.Topic, r.Partition}
		if off, ok := failed[p]; !ok || r.Offset < off {
			failed[p] = r.Offset
		}
	}
	held := func(r *kgo.Record) bool {
		off, ok := failed[tp{r.Topic, r.Partition}]
		return ok && r.Offset >= off
	}
	for start := 0; start < len(recs); start += c.cfg.BatchSize {
		batch := recs[start:min(start+c.cfg.BatchSize, len(recs))]
		items := make([]item, 0, len(batch))
		for _, r := range batch {
			if held(r) {
				continue // keep per-partition order: nothing after a failure
			}
			items = append(items, c.decode(ctx, r))
		}
		for r := range c.deadLetter(ctx, items) {
			stop(r)
		}
		items = slices.DeleteFunc(items, func(it item) bool { return held(it.rec) })
		if len(items) == 0 {
			continue
		}
		// Records correlated to waits and events sent to executions are applied in
		// transactions of their own. They never share a partition (the events topic holds
		// only the latter), so a failure of one stops only its own partitions.
		_, applyErr := c.apply(ctx, items)
		if db.IsRefusedData(applyErr) {
			applyErr = c.isolate(ctx, items, applyErr, c.apply)
		}
		_, sendErr := c.send(ctx, items)
		if db.IsRefusedData(sendErr) {
			sendErr = c.isolate(ctx, items, sendErr, c.send)
		}
		for _, err := range []error{applyErr, sendErr} {
			if err != nil {
				c.databaseError(ctx)
				c.logger.ErrorContext(ctx, "applying records failed", "err", err, "records", len(items), "instance_id", c.cfg.ClientID)
				unavailable = unavailable || db.IsUnavailable(err)
			}
		}
		for _, it := range items {
			if events := it.rec.Topic == c.cfg.EventsTopic; (events && sendErr != nil) || (!events && applyErr != nil) {
				stop(it.rec) // its partition's first record of the batch: all of them come back
			}
		}
		// Records the database refused became poison while being applied, after the
		// records around them; they are dead-lettered now. Should that fail, what came
		// after them is applied again with them, and absorbed as duplicates.
		for r := range c.deadLetter(ctx, slices.DeleteFunc(slices.Clone(items), func(it item) bool { return held(it.rec) })) {
			stop(r)
		}
		for _, it := range items {
			if held(it.rec) {
				continue
			}
			if it.skip != "" {
				c.count(it.skip)
				c.agg.RecordRejected(ctx, sourceKind, it.skip)
				c.logger.WarnContext(recordCtx(ctx, it.rec), "kafka record without usable ids ignored", "reason", it.skip, "topic", it.rec.Topic,
					"partition", it.rec.Partition, "offset", it.rec.Offset, "instance_id", c.cfg.ClientID)
			}
			done[tp{it.rec.Topic, it.rec.Partition}] = it.rec
		}
	}
	c.forgetLettered(done)
	return failed, done, unavailable
}

// isolate runs fn on each of items alone, after the database refused the data of the
// batch they were in (cause): a value that CheckStorable lets through but PostgreSQL
// refuses, or one past a limit of its own. Every retry of the batch would fail alike
// and hold its partitions back for good, so the record that carries it is found and
// becomes poison (dead-lettered with the database's reason), and the others are applied
// each in a transaction of its own. Any other failure stops there, as a batch's does:
// the records applied meanwhile come back as duplicates, which the aggregator absorbs.
//
// When several records were tried and none applied alone, the refusal is not one
// record's value but something every statement meets (a broken schema, say): nothing
// is dead-lettered and the batch fails as it did, to be retried.
func (c *Consumer) isolate(ctx context.Context, items []item, cause error,
	fn func(context.Context, []item) (bool, error)) error {
	c.logger.WarnContext(ctx, "the database refused a batch's data; applying its records one by one", "err", cause,
		"records", len(items), "instance_id", c.cfg.ClientID)
	var refused []int
	tried := 0
	for i := range items {
		it := &items[i]
		if it.poison != "" {
			continue
		}
		t, err := fn(ctx, items[i:i+1])
		if t {
			tried++
		}
		if db.IsRefusedData(err) {
			it.poison, it.poisonCategory = "PostgreSQL refused the value: "+db.Reason(err), poisonUnstorable
			refused = append(refused, i)
			continue
		}
		if err != nil {
			return err
		}
	}
	if len(refused) > 1 && len(refused) == tried {
		for _, i := range refused {
			items[i].poison, items[i].poisonCategory = "", ""
		}
		return cause
	}
	return nil
}

// decode validates a record and extracts its ids and match keys, or, on the events
// topic, the event it sends. It is pure.
func (c *Consumer) decode(ctx context.Context, r *kgo.Record) item {
	if r.Topic == c.cfg.EventsTopic {
		return c.decodeSent(r)
	}
	it := item{rec: r}
	fields := c.fieldsFor(r.Topic)
	poison := func(category, reason string, payload any) item {
		it.poison, it.poisonCategory = reason, category
		// Best effort, for the log line: the ids in the payload when it could be read,
		// else in the headers.
		it.events, _ = extract(payload, r, fields)
		return it
	}
	if len(r.Value) > c.cfg.MaxRecordBytes {
		return poison(poisonTooLarge, fmt.Sprintf("record value of %d bytes exceeds %d", len(r.Value), c.cfg.MaxRecordBytes), nil)
	}
	// Numbers stay exact (jsonnum): 1e400 is JSON, and an id beyond 2^53 is not rounded
	// into its neighbour's.
	payload, err := jsonnum.Decode(r.Value)
	if err != nil {
		return poison(poisonNotJSON, "value is not JSON: "+err.Error(), nil)
	}
	if err := aggregator.CheckStorable(r.Value); err != nil {
		return poison(poisonUnstorable, unstorableReason(err), payload)
	}
	events, reason := extract(payload, r, fields)
	if keys := aggregator.MatchKeys(r.Topic, payload, c.matchSpecsFor(r.Topic)); len(keys) > 0 {
		// Besides its ids, if any: a record may answer waits of both kinds.
		events = append(events, aggregator.Event{MatchKeys: keys, Payload: r.Value, Source: sourceOf(r)})
	}
	if len(events) == 0 {
		it.skip = reason
		return it
	}
	link := c.linkOf(r)
	for i := range events {
		events[i].Link = link
	}
	it.events = events
	return it
}

// unstorableReason is the dead-letter reason of a value PostgreSQL cannot store.
func unstorableReason(err error) string {
	var ue *aggregator.UnstorableError
	if errors.As(err, &ue) {
		return "value cannot be stored in PostgreSQL: " + ue.Reason
	}
	return err.Error()
}

// sourceOf is where an event read from r came from.
func sourceOf(r *kgo.Record) aggregator.Source {
	partition, offset := r.Partition, r.Offset
	return aggregator.Source{Kind: sourceKind, Topic: r.Topic, Partition: &partition, Offset: &offset}
}

// extract finds the ids of a record: each configured field pair in the payload, else
// the record header of the same name. Several configurations of one topic may yield
// several candidates; each distinct one is tried.
func extract(payload any, r *kgo.Record, fields []idFields) ([]aggregator.Event, string) {
	field := func(path string) string {
		if v, ok := dotpath.Get(payload, path); ok {
			if s, ok := v.(string); ok {
				return s
			}
		}
		return headerOf(r, path)
	}
	var events []aggregator.Event
	reason := ReasonMissingID
	for _, f := range fields {
		execRaw, corrRaw := field(f.exec), field(f.corr)
		if execRaw == "" || corrRaw == "" {
			continue
		}
		execID, err1 := uuid.Parse(execRaw)
		corrID, err2 := uuid.Parse(corrRaw)
		if err1 != nil || err2 != nil {
			reason = ReasonInvalidID
			continue
		}
		if slices.ContainsFunc(events, func(e aggregator.Event) bool { return e.ExecutionID == execID && e.CorrelationID == corrID }) {
			continue
		}
		// No name: the aggregator decides which of the wait's Kafka events (kafka_event or
		// a named one) the record is, by its topic, type and filter.
		events = append(events, aggregator.Event{
			ExecutionID: execID, CorrelationID: corrID, Payload: r.Value, Source: sourceOf(r),
		})
	}
	if len(events) == 0 {
		return nil, reason
	}
	return events, ""
}

// apply records a batch's events in one transaction, in record order (so events of one
// wait keep their order; ApplyBatch locks the rows in a stable order itself).
func (c *Consumer) apply(ctx context.Context, items []item) (touchedDB bool, err error) {
	var batch []aggregator.Event
	var recs []*kgo.Record // batch[i] came from recs[i]
	for _, it := range items {
		if it.poison != "" {
			continue
		}
		batch = append(batch, it.events...)
		for range it.events {
			recs = append(recs, it.rec)
		}
	}
	if len(batch) == 0 {
		return false, nil
	}
	var results []aggregator.Result
	for attempt := 1; ; attempt++ {
		err = db.Tx(ctx, c.pool, func(tx pgx.Tx) error {
			var err error
			results, err = c.agg.ApplyBatch(ctx, tx, batch)
			return err
		})
		if err == nil || !db.IsRetryable(err) || attempt == sendAttempts {
			break
		}
		c.logger.DebugContext(ctx, "apply transaction conflicted; retrying", "err", err, "attempt", attempt, "instance_id", c.cfg.ClientID)
	}
	if err != nil {
		return true, err
	}
	c.agg.Observe(ctx, batch, results)
	for i, res := range results {
		c.count(string(res.Outcome))
		ev := batch[i]
		rctx := recordCtx(ctx, recs[i])
		if len(ev.MatchKeys) > 0 {
			c.logMatch(rctx, ev, res)
			continue
		}
		attrs := append(waitAttrs(ev, res.NodeID), "instance_id", c.cfg.ClientID, "topic", ev.Source.Topic,
			"partition", *ev.Source.Partition, "offset", *ev.Source.Offset, "event", res.Event, "outcome", res.Outcome)
		switch res.Outcome {
		case aggregator.Completed:
			c.logger.InfoContext(rctx, "kafka event completed a wait", attrs...)
		case aggregator.Recorded:
			c.logger.InfoContext(rctx, "kafka event recorded", attrs...)
		case aggregator.Duplicate, aggregator.NotFound, aggregator.FilterMismatch:
			c.logger.DebugContext(rctx, "kafka event not applied", attrs...)
		case aggregator.IDMismatch:
			c.logger.ErrorContext(rctx, "kafka event not applied: id mismatch", attrs...)
		default:
			c.logger.WarnContext(rctx, "kafka event not applied", attrs...)
		}
	}
	if aggregator.Queued(results) {
		c.agg.Continued()
	}
	return true, nil
}

// logMatch reports a record correlated by payload match: how many waits it reached
// and what it did at each. A record whose value no wait expects is routine on a shared
// topic, hence debug; the aggregator records it in unmatched_events.
func (c *Consumer) logMatch(ctx context.Context, ev aggregator.Event, res aggregator.Result) {
	attrs := []any{"instance_id", c.cfg.ClientID, "topic", ev.Source.Topic, "partition", *ev.Source.Partition,
		"offset", *ev.Source.Offset, "outcome", res.Outcome, "deliveries", len(res.Deliveries)}
	if res.Outcome == aggregator.NoMatch {
		c.logger.DebugContext(ctx, "kafka record matched no wait by payload", attrs...)
		return
	}
	applied, completed := 0, 0
	for _, d := range res.Deliveries {
		switch d.Outcome {
		case aggregator.Completed:
			completed++
			applied++
		case aggregator.Recorded:
			applied++
		}
	}
	attrs = append(attrs, "applied", applied, "completed", completed)
	if applied > 0 {
		c.logger.InfoContext(ctx, "kafka record matched waits by payload", attrs...)
	} else {
		c.logger.DebugContext(ctx, "kafka record matched waits by payload; none took it", attrs...)
	}
	for _, d := range res.Deliveries {
		c.logger.DebugContext(ctx, "payload match delivery", "wait_state_id", d.WaitStateID, "node_id", d.NodeID,
			"event", d.Event, "outcome", d.Outcome, "instance_id", c.cfg.ClientID, "topic", ev.Source.Topic,
			"partition", *ev.Source.Partition, "offset", *ev.Source.Offset)
	}
}

// deadLetter produces the batch's poison records to their dead-letter topics,
// synchronously, and returns the records whose write failed. Records it dead-lettered
// already, for an earlier try of their batch, are not written again.
func (c *Consumer) deadLetter(ctx context.Context, items []item) map[*kgo.Record]bool {
	var out []*kgo.Record
	src := map[*kgo.Record]item{} // dead-letter record -> its source
	for _, it := range items {
		if it.poison == "" || c.isLettered(it.rec) {
			continue
		}
		r := it.rec
		key := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
		seen, _ := c.firstSeen.LoadOrStore(key, time.Now().UTC())
		headers := append([]kgo.RecordHeader{}, r.Headers...)
		headers = append(headers,
			kgo.RecordHeader{Key: HeaderReason, Value: []byte(it.poison)},
			kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
			kgo.RecordHeader{Key: HeaderOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
			kgo.RecordHeader{Key: HeaderFirstSeen, Value: []byte(seen.(time.Time).Format(time.RFC3339Nano))},
		)
		// Produced under the source record's span: the publish span (and the traceparent
		// kotel writes over the copied one) continue the record's trace.
		dl := &kgo.Record{Topic: r.Topic + c.cfg.DLQSuffix, Key: r.Key, Value: r.Value, Headers: headers,
			Context: recordCtx(ctx, r)}
		out = append(out, dl)
		src[dl] = it
	}
	if len(out) == 0 {
		return nil
	}
	failed := map[*kgo.Record]bool{}
	// Results arrive in completion order, not input order: match them by record.
	for _, res := range c.cl.ProduceSync(ctx, out...) {
		it := src[res.Record]
		r := it.rec
		var attrs []any
		if len(it.events) > 0 {
			attrs = waitAttrs(it.events[0], "")
		}
		attrs = append(attrs, "instance_id", c.cfg.ClientID, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
		rctx := recordCtx(ctx, r)
		if res.Err != nil {
			failed[r] = true
			c.logger.ErrorContext(rctx, "dead-letter write failed; partition stops here", append(attrs, "err", res.Err)...)
			continue
		}
		c.remember(r)
		c.count(ReasonPoison)
		c.deadLettered(ctx, r.Topic, it.poisonCategory)
		c.firstSeen.Delete(fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset))
		c.logger.WarnContext(rctx, "poison record dead-lettered", append(attrs, "dlq_topic", res.Record.Topic, "reason", it.poison)...)
	}
	return failed
}

func (c *Consumer) remember(r *kgo.Record) {
	c.letteredMu.Lock()
	defer c.letteredMu.Unlock()
	p := tp{r.Topic, r.Partition}
	if c.lettered[p] == nil {
		c.lettered[p] = map[int64]bool{}
	}
	c.lettered[p][r.Offset] = true
}

func (c *Consumer) isLettered(r *kgo.Record) bool {
	c.letteredMu.Lock()
	defer c.letteredMu.Unlock()
	return c.lettered[tp{r.Topic, r.Partition}][r.Offset]
}

// forgetLettered drops from lettered, per partition, the offsets up to its last handled
// record: once per lane and poll, not per record.
func (c *Consumer) forgetLettered(done map[tp]*kgo.Record) {
	c.letteredMu.Lock()
	defer c.letteredMu.Unlock()
	if len(c.lettered) == 0 {
		return
	}
	for p, r := range done {
		for off := range c.lettered[p] {
			if off <= r.Offset {
				delete(c.lettered[p], off)
			}
		}
		if len(c.lettered[p]) == 0 {
			delete(c.lettered, p)
		}
	}
}

// forgetPartitions drops what lettered and firstSeen hold of partitions another member
// may now own; should they come back here uncommitted, their dead letters are written
// again (the dead-letter topic is at-least-once across rebalances, like everything
// else), and first seen anew.
func (c *Consumer) forgetPartitions(parts map[string][]int32) {
	c.letteredMu.Lock()
	defer c.letteredMu.Unlock()
	for t, ps := range parts {
		for _, p := range ps {
			delete(c.lettered, tp{t, p})
			prefix := fmt.Sprintf("%s/%d/", t, p)
			c.firstSeen.Range(func(k, _ any) bool {
				if strings.HasPrefix(k.(string), prefix) {
					c.firstSeen.Delete(k)
				}
				return true
			})
		}
	}
}

// waitAttrs name the wait an event is for in a log line; node_id only when known (a
// decided event found its wait).
func waitAttrs(ev aggregator.Event, nodeID string) []any {
	attrs := []any{"execution_id", ev.ExecutionID, "correlation_id", ev.CorrelationID}
	if nodeID != "" {
		attrs = append(attrs, "node_id", nodeID)
	}
	return attrs
}
