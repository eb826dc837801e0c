package consumer

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
)

// item is one record on its way through a batch.
type item struct {
	rec *kgo.Record
	// poison is the dead-letter reason (free text, for the header); poisonCategory is
	// its category (poisonTooLarge…, for the metric).
	poison         string
	poisonCategory string
	// skip is why a record without usable ids is not applied; it is counted once the
	// record is handled, not on every retry of its batch.
	skip DeadLetterReason
	// events are the record's candidate events: one per pair of ids it carries, and one
	// correlated by payload match when it holds a value of a match. A poison record's are
	// not applied, they only name the wait in log lines.
	events []aggregator.Event
	// sent is the event a valid record of the events topic sends to its execution.
	sent *aggregator.Sent
	// starts are the executions the record's triggers start.
	starts []start
	// key is the record's key as its triggers read it: text, or decoded under its schema.
	key any
	// schemaID is the schema id the value (or key) named, for a dead letter's header.
	schemaID int
	// unavailable: the schema registry could not be asked for the record's schema. The
	// record is not poison: its partition stalls here and retries.
	unavailable error
}

// process applies a poll's records in batches and commits what was handled. It returns,
// per partition that could not be fully handled, the offset to resume from and why, and
// per partition the last record handled.
func (c *Consumer) process(ctx context.Context, recs []*kgo.Record) (map[tp]hold, map[tp]*kgo.Record) {
	if err := c.catchUp(ctx); err != nil {
		// Decoding with definitions that may be stale could skip a record: the whole
		// poll comes back instead.
		c.databaseError(ctx)
		c.dbFailing.Store(true)
		c.logger.ErrorContext(ctx, "reading definitions failed", "err", err, "records", len(recs), "instance_id", c.cfg.ClientID)
		failed := map[tp]hold{}
		for _, r := range recs {
			if _, ok := failed[tp{r.Topic, r.Partition}]; !ok {
				// A partition's records come in order.
				failed[tp{r.Topic, r.Partition}] = hold{offset: r.Offset, reason: StallDatabase, err: err}
			}
		}
		return failed, nil
	}
	lanes := spreadOverLanes(recs, c.cfg.Lanes)
	type laneResult struct {
		failed      map[tp]hold
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

	failed := map[tp]hold{}
	done := map[tp]*kgo.Record{}
	var commit []*kgo.Record
	unavailable := false
	for _, r := range results {
		unavailable = unavailable || r.unavailable
		maps.Copy(failed, r.failed)
		maps.Copy(done, r.done)
		for _, rec := range r.done {
			commit = append(commit, rec)
		}
	}
	if len(commit) > 0 {
		if err := c.cl.CommitRecords(ctx, commit...); err != nil {
			// The records are applied; redelivery after a rebalance or restart is absorbed
			// as duplicates.
			c.logger.WarnContext(ctx, "offset commit failed", "err", err, "instance_id", c.cfg.ClientID)
		} else {
			for _, r := range commit {
				c.cfg.TestSignals.Committed.Set(TopicPartition{r.Topic, r.Partition}, r.Offset+1)
			}
		}
	}
	c.setHealth(ctx, unavailable)
	return failed, done
}

// spreadOverLanes splits a poll's records into n lanes, applied side by side, each on
// its own connection. A partition stays in one lane, so its records keep their order.
// The poll waits for its slowest lane, so the lanes are balanced by records: the
// partitions, most records first, each go to the lane holding the fewest so far.
func spreadOverLanes(recs []*kgo.Record, n int) [][]*kgo.Record {
	count := map[tp]int{}
	var parts []tp // in order of first record, for ties
	for _, r := range recs {
		p := tp{r.Topic, r.Partition}
		if count[p] == 0 {
			parts = append(parts, p)
		}
		count[p]++
	}
	slices.SortStableFunc(parts, func(a, b tp) int { return count[b] - count[a] })
	load := make([]int, n)
	laneOf := make(map[tp]int, len(parts))
	for _, p := range parts {
		l := 0
		for i := range load {
			if load[i] < load[l] {
				l = i
			}
		}
		laneOf[p] = l
		load[l] += count[p]
	}
	lanes := make([][]*kgo.Record, n)
	for _, r := range recs {
		l := laneOf[tp{r.Topic, r.Partition}]
		lanes[l] = append(lanes[l], r)
	}
	return lanes
}

// processLane applies one lane's records in batches. It returns, per partition, the
// offset to resume from (and why) when not everything could be handled, and the last
// record handled.
//
// A batch's poison records are dead-lettered before anything is applied: when a
// dead-letter write fails, the records after it on its partition have not been applied
// either, and come back with it, applied once. Dead letters written for a batch that
// then fails are remembered (c.lettered), so its retry does not write them again.
//
// unavailable reports that applying met an error saying the database could not be
// reached (see setHealth).
func (c *Consumer) processLane(ctx context.Context, recs []*kgo.Record) (failed map[tp]hold, done map[tp]*kgo.Record, unavailable bool) {
	failed = map[tp]hold{}
	done = map[tp]*kgo.Record{}
	// stop holds back r's partition from r on, for reason; held reports whether r is
	// held back.
	stop := func(r *kgo.Record, reason StallReason, err error) {
		p := tp{r.Topic, r.Partition}
		if h, ok := failed[p]; !ok || r.Offset < h.offset {
			failed[p] = hold{offset: r.Offset, reason: reason, err: err}
		}
	}
	held := func(r *kgo.Record) bool {
		h, ok := failed[tp{r.Topic, r.Partition}]
		return ok && r.Offset >= h.offset
	}
	for start := 0; start < len(recs); start += c.cfg.BatchSize {
		batch := recs[start:min(start+c.cfg.BatchSize, len(recs))]
		items := make([]item, 0, len(batch))
		for _, r := range batch {
			if held(r) {
				continue // keep per-partition order: nothing after a failure
			}
			it := c.decode(ctx, r)
			if it.unavailable != nil {
				// Not the record's fault: nothing of its partition from here on is
				// handled; it is rewound to it and retried after a backoff.
				stop(r, StallSchemaRegistry, it.unavailable)
				continue
			}
			items = append(items, it)
		}
		for r, err := range c.deadLetter(ctx, items) {
			stop(r, StallDeadLetter, err)
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
		// Triggers start executions after the record's events were applied to waits;
		// should starting fail, both come back and the applied events are duplicates.
		var triggerErr error
		if applyErr == nil {
			if _, triggerErr = c.trigger(ctx, items); db.IsRefusedData(triggerErr) {
				triggerErr = c.isolate(ctx, items, triggerErr, c.trigger)
			}
		}
		for _, err := range []error{applyErr, sendErr, triggerErr} {
			if err != nil {
				c.databaseError(ctx)
				c.logger.ErrorContext(ctx, "applying records failed", "err", err, "records", len(items), "instance_id", c.cfg.ClientID)
				unavailable = unavailable || db.IsUnavailable(err)
			}
		}
		for _, it := range items {
			if it.rec.Topic == c.cfg.EventsTopic && sendErr != nil {
				stop(it.rec, StallDatabase, sendErr) // its partition's first record of the batch: all of them come back
			} else if it.rec.Topic != c.cfg.EventsTopic && applyErr != nil {
				stop(it.rec, StallDatabase, applyErr)
			} else if it.rec.Topic != c.cfg.EventsTopic && triggerErr != nil {
				stop(it.rec, StallDatabase, triggerErr)
			}
		}
		// Records the database refused became poison while being applied, after the
		// records around them; they are dead-lettered now. Should that fail, what came
		// after them is applied again with them, and absorbed as duplicates.
		for r, err := range c.deadLetter(ctx, slices.DeleteFunc(slices.Clone(items), func(it item) bool { return held(it.rec) })) {
			stop(r, StallDeadLetter, err)
		}
		for _, it := range items {
			if held(it.rec) {
				continue
			}
			if it.skip != "" {
				c.skipped(ctx, it)
			}
			done[tp{it.rec.Topic, it.rec.Partition}] = it.rec
		}
	}
	c.forgetLettered(done)
	return failed, done, unavailable
}

// skipped counts and logs a record ignored for want of usable ids.
func (c *Consumer) skipped(ctx context.Context, it item) {
	c.count(string(it.skip))
	c.agg.RecordRejected(ctx, sourceKind, string(it.skip))
	level := slog.LevelWarn
	if len(c.triggersFor(it.rec.Topic)) > 0 {
		level = slog.LevelDebug // a trigger's topic carries records of other types too
	}
	if c.logger.Enabled(ctx, level) { // the record's trace is read from its headers only for a line
		c.logger.Log(c.recordCtx(ctx, it.rec), level, "kafka record without usable ids ignored", "reason", it.skip, "topic", it.rec.Topic,
			"partition", it.rec.Partition, "offset", it.rec.Offset, "instance_id", c.cfg.ClientID)
	}
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

// apply records a batch's events in one transaction, in record order (so events of one
// wait keep their order; CommitBatch locks the rows in a stable order itself).
func (c *Consumer) apply(ctx context.Context, items []item) (touchedDB bool, err error) {
	// Most records carry one event.
	batch := make([]aggregator.Event, 0, len(items))
	for _, it := range items {
		if it.poison != "" {
			continue
		}
		batch = append(batch, it.events...)
	}
	if len(batch) == 0 {
		return false, nil
	}
	results, err := c.agg.CommitBatch(ctx, batch)
	if err != nil {
		return true, err
	}
	debug := c.logger.Enabled(ctx, slog.LevelDebug)
	for i, res := range results {
		c.count(string(res.Outcome))
		ev := batch[i]
		if len(ev.MatchKeys) > 0 {
			if debug {
				c.logMatch(linkCtx(ctx, ev.Link), ev, res)
			}
			continue
		}
		level, msg := outcomeLine(res.Outcome)
		if level == slog.LevelDebug && !debug {
			// Most records end here: their line's attributes are not built for nothing.
			continue
		}
		attrs := append(waitAttrs(ev, res.NodeID), "instance_id", c.cfg.ClientID, "topic", ev.Source.Topic,
			"partition", *ev.Source.Partition, "offset", *ev.Source.Offset, "event", res.Event, "outcome", res.Outcome)
		c.logger.Log(linkCtx(ctx, ev.Link), level, msg, attrs...)
	}
	return true, nil
}

// outcomeLine is the level and message of the line for a Kafka event that ended with
// outcome: routine outcomes at debug, an event addressed to another wait at error, any
// other refusal at warn.
func outcomeLine(outcome aggregator.Outcome) (slog.Level, string) {
	switch outcome {
	case aggregator.Completed:
		return slog.LevelDebug, "kafka event completed a wait"
	case aggregator.Recorded:
		return slog.LevelDebug, "kafka event recorded"
	case aggregator.Duplicate, aggregator.NotFound, aggregator.FilterMismatch:
		return slog.LevelDebug, "kafka event not applied"
	case aggregator.IDMismatch:
		return slog.LevelError, "kafka event not applied: id mismatch"
	default:
		return slog.LevelWarn, "kafka event not applied"
	}
}

// logMatch reports a record correlated by payload match: how many waits it reached
// and what it did at each. A record whose value no wait expects is routine on a shared
// topic, hence debug; the aggregator records it in unmatched_events. Every line here is
// at debug, and apply calls it only when debug is enabled.
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
		c.logger.DebugContext(ctx, "kafka record matched waits by payload", attrs...)
	} else {
		c.logger.DebugContext(ctx, "kafka record matched waits by payload; none took it", attrs...)
	}
	for _, d := range res.Deliveries {
		c.logger.DebugContext(ctx, "payload match delivery", "wait_state_id", d.WaitStateID, "node_id", d.NodeID,
			"event", d.Event, "outcome", d.Outcome, "instance_id", c.cfg.ClientID, "topic", ev.Source.Topic,
			"partition", *ev.Source.Partition, "offset", *ev.Source.Offset)
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
