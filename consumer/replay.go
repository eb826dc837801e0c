package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// HeaderReplayedFrom marks a record re-produced from a dead-letter topic by
// ReplayDeadLetters: its value is "<dead-letter topic>/<partition>/<offset>".
const HeaderReplayedFrom = "rendezvous-replayed-from"

// HeaderReplayedReason carries the reason the record had been dead-lettered for.
const HeaderReplayedReason = "rendezvous-replayed-reason"

// ReplayConfig selects the dead-letter records ReplayDeadLetters re-produces.
type ReplayConfig struct {
	// Kafka holds the connection (brokers, SASL, TLS); ClientID defaults to
	// "rendezvous-dlq-replay". Its consumer settings are unused.
	Kafka Config
	// Topic is the dead-letter topic to drain, e.g. shipments.events.dlq. Required.
	Topic string
	// Since, when not zero, skips records dead-lettered before it (by record timestamp).
	Since time.Time
	// DryRun reports what would be replayed and produces nothing.
	DryRun bool
	// Timeout bounds the whole run. Default 60 s.
	Timeout time.Duration
}

// ReplayedRecord is one dead-letter record ReplayDeadLetters handled.
type ReplayedRecord struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	// SourceTopic is the topic it came from and goes back to (rendezvous-dlq-topic).
	SourceTopic string
	Reason      string
	// Skipped says why the record was not replayed; empty when it was (or would be).
	Skipped string
}

// ReplayReport is what ReplayDeadLetters did.
type ReplayReport struct {
	Records  []ReplayedRecord
	Replayed int
	Skipped  int
}

// ReplayDeadLetters reads a dead-letter topic from its start (or Since) to the end it
// had when the run began, and re-produces each record the consumer dead-lettered to its
// source topic: same key and value, its own headers without the dead-letter ones, and
// HeaderReplayedFrom (and HeaderReplayedReason) saying it was replayed. Records without
// a source topic header were not written by this consumer and are skipped. Production
// is synchronous: a run that returns nil replayed every record it reports.
//
// Nothing records that a record was replayed, so running it twice replays twice. That
// is harmless for the events the aggregator decides (a record applied already is a
// duplicate by its payload), and Since narrows a second run.
func ReplayDeadLetters(ctx context.Context, cfg ReplayConfig) (ReplayReport, error) {
	var rep ReplayReport
	if cfg.Topic == "" {
		return rep, errors.New("topic: must not be empty")
	}
	if cfg.Kafka.ClientID == "" {
		cfg.Kafka.ClientID = "rendezvous-dlq-replay"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	opts, err := cfg.Kafka.clientOpts()
	if err != nil {
		return rep, err
	}
	start := kgo.NewOffset().AtStart()
	if !cfg.Since.IsZero() {
		start = kgo.NewOffset().AfterMilli(cfg.Since.UnixMilli())
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(cfg.Topic), kgo.ConsumeResetOffset(start))...)
	if err != nil {
		return rep, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()

	remaining, err := replayRange(ctx, cl, cfg)
	if err != nil || len(remaining) == 0 {
		return rep, err
	}

	for len(remaining) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("read %s: %w (partitions left: %d)", cfg.Topic, err, len(remaining))
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return rep, fmt.Errorf("read %s: %w", cfg.Topic, errs[0].Err)
		}
		var out []*kgo.Record
		var outIdx []int
		fetches.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
			rec, again := replayOf(cfg, r)
			rep.Records = append(rep.Records, rec)
			if again == nil {
				rep.Skipped++
				return
			}
			rep.Replayed++
			out = append(out, again)
			outIdx = append(outIdx, len(rep.Records)-1)
		})
		if cfg.DryRun || len(out) == 0 {
			continue
		}
		if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
			// Which of this batch were written is unknown: report none of it as replayed.
			for _, i := range outIdx {
				rep.Records[i].Skipped = "produce failed"
			}
			rep.Replayed -= len(out)
			rep.Skipped += len(out)
			return rep, fmt.Errorf("produce to source topics: %w", err)
		}
	}
	return rep, nil
}

// replayRange returns, per partition of cfg.Topic with something to replay, the end it
// has now: records dead-lettered during the run wait for the next one, so a record that
// fails again cannot loop. Partitions whose records all precede Since have nothing to
// read and are left out.
func replayRange(ctx context.Context, cl *kgo.Client, cfg ReplayConfig) (map[int32]int64, error) {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", cfg.Topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", cfg.Topic, err)
	}
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	if len(remaining) == 0 || cfg.Since.IsZero() {
		return remaining, nil
	}
	starts, err := kadm.NewClient(cl).ListOffsetsAfterMilli(ctx, cfg.Since.UnixMilli(), cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s after %s: %w", cfg.Topic, cfg.Since.Format(time.RFC3339), err)
	}
	starts.Each(func(o kadm.ListedOffset) {
		if end, ok := remaining[o.Partition]; ok && (o.Offset < 0 || o.Offset >= end) {
			delete(remaining, o.Partition)
		}
	})
	return remaining, nil
}

// replayOf reads a dead letter's headers and returns what the report says of it and the
// record to produce again to its source topic: same key and value, its own headers
// without the dead-letter ones, and where it was replayed from. The record is nil when
// the dead letter is skipped (rec.Skipped says why).
func replayOf(cfg ReplayConfig, r *kgo.Record) (rec ReplayedRecord, again *kgo.Record) {
	rec = ReplayedRecord{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp}
	var headers []kgo.RecordHeader
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderTopic:
			rec.SourceTopic = string(h.Value)
		case HeaderReason:
			rec.Reason = string(h.Value)
		}
		if !strings.HasPrefix(h.Key, "rendezvous-dlq-") {
			headers = append(headers, h)
		}
	}
	switch {
	case !cfg.Since.IsZero() && r.Timestamp.Before(cfg.Since):
		rec.Skipped = "before --since"
	case rec.SourceTopic == "":
		rec.Skipped = "no " + HeaderTopic + " header"
	case rec.SourceTopic == cfg.Topic:
		rec.Skipped = "its source topic is the dead-letter topic itself"
	}
	if rec.Skipped != "" {
		return rec, nil
	}
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderReplayedFrom, Value: []byte(cfg.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10))},
		kgo.RecordHeader{Key: HeaderReplayedReason, Value: []byte(rec.Reason)},
	)
	return rec, &kgo.Record{Topic: rec.SourceTopic, Key: r.Key, Value: r.Value, Headers: headers}
}
