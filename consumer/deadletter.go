package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Dead-letter headers.
const (
	HeaderReason    = "rendezvous-dlq-reason"
	HeaderTopic     = "rendezvous-dlq-topic"
	HeaderPartition = "rendezvous-dlq-partition"
	HeaderOffset    = "rendezvous-dlq-offset"
	HeaderFirstSeen = "rendezvous-dlq-first-seen"
	// HeaderSchemaID is the schema id a record in the schema registry wire format named,
	// on a dead letter that has one.
	HeaderSchemaID = "rendezvous-dlq-schema-id"
)

// deadLetter produces the batch's poison records to their dead-letter topics and
// returns the records whose write failed, with the error. Records it dead-lettered
// already, for an earlier try of their batch, are not written again.
//
// The write is bounded by Config.DLQWriteTimeout, and given up at once when the consumer
// stops: a dead letter that has not been acknowledged by then counts as failed, so its
// partition is rewound to it and nothing after it is committed. The Kafka client may
// still deliver an abandoned write later; the retry then writes the record again, so a
// dead-letter topic holds each poison record at least once, as everything else.
func (c *Consumer) deadLetter(ctx context.Context, items []item) map[*kgo.Record]error {
	var out []*kgo.Record
	src := map[*kgo.Record]item{} // dead-letter record -> its source
	writeCtx, cancel := context.WithTimeout(ctx, c.cfg.DLQWriteTimeout)
	defer cancel()
	failed := map[*kgo.Record]error{}
	for _, it := range items {
		if it.poison == "" || c.isLettered(it.rec) {
			continue
		}
		r := it.rec
		seen, _ := c.firstSeen.LoadOrStore(positionKey(r), time.Now().UTC())
		if c.dlqTopics.knownMissing(r.Topic) {
			err := fmt.Errorf("dead-letter topic %s%s does not exist and could not be created: %w", r.Topic, c.cfg.DLQSuffix, kerr.UnknownTopicOrPartition)
			c.dlqWriteFailed(ctx, it, err, dlqFailUnknownTopic)
			failed[r] = err
			continue
		}
		headers := append([]kgo.RecordHeader{}, r.Headers...)
		headers = append(headers,
			kgo.RecordHeader{Key: HeaderReason, Value: []byte(it.poison)},
			kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
			kgo.RecordHeader{Key: HeaderOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
			kgo.RecordHeader{Key: HeaderFirstSeen, Value: []byte(seen.(time.Time).Format(time.RFC3339Nano))},
		)
		if it.schemaID != 0 {
			headers = append(headers, kgo.RecordHeader{Key: HeaderSchemaID, Value: []byte(strconv.Itoa(it.schemaID))})
		}
		// Produced under the source record's span: the publish span (and the traceparent
		// kotel writes over the copied one) continue the record's trace. The record's
		// context carries the write's deadline, which also ends the client's own wait for
		// a topic it does not know.
		dl := &kgo.Record{Topic: r.Topic + c.cfg.DLQSuffix, Partition: r.Partition, Key: r.Key, Value: r.Value,
			Headers: headers, Context: c.recordCtx(writeCtx, r)}
		out = append(out, dl)
		src[dl] = it
	}
	if len(out) == 0 {
		return failed
	}
	results := make(chan kgo.ProduceResult, len(out))
	for _, dl := range out {
		c.cl.Produce(dl.Context, dl, func(r *kgo.Record, err error) { results <- kgo.ProduceResult{Record: r, Err: err} })
	}
	pending := maps.Clone(src)
	fail := func(it item, err error, category string) {
		failed[it.rec] = err
		c.dlqWriteFailed(ctx, it, err, category)
	}
	// Results arrive in completion order, not input order: match them by record.
	for len(pending) > 0 {
		select {
		case res := <-results:
			it := src[res.Record]
			delete(pending, res.Record)
			if res.Err != nil {
				fail(it, res.Err, dlqFailureCategory(res.Err))
				continue
			}
			r := it.rec
			c.remember(r)
			c.count(string(ReasonPoison))
			c.deadLettered(ctx, r.Topic, it.poisonCategory)
			c.firstSeen.Delete(positionKey(r))
			c.logger.WarnContext(c.recordCtx(ctx, r), "poison record dead-lettered",
				append(c.deadLetterAttrs(it), "dlq_topic", res.Record.Topic, "reason", it.poison)...)
		case <-writeCtx.Done():
			for _, it := range pending {
				fail(it, fmt.Errorf("no acknowledgement within %s", c.cfg.DLQWriteTimeout), dlqFailTimeout)
			}
			return failed
		case <-c.stopping:
			for _, it := range pending {
				fail(it, errors.New("the consumer is stopping"), dlqFailShutdown)
			}
			return failed
		}
	}
	return failed
}

// positionKey names a record by its position, as firstSeen keys it (forgetPartitions
// drops a partition's keys by their "topic/partition/" prefix).
func positionKey(r *kgo.Record) string {
	return fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
}

// dlqWriteFailed reports a failed dead-letter write of it's record: counted, logged, and
// when its topic was missing, provisioning asked to look at it again.
func (c *Consumer) dlqWriteFailed(ctx context.Context, it item, err error, category string) {
	c.deadLetterFailed(ctx, it.rec.Topic, category)
	if category == dlqFailUnknownTopic {
		// Provisioned once, then deleted, or never: look again now.
		c.dlqTopics.missing(it.rec.Topic)
		c.Refresh()
	}
	c.logger.ErrorContext(c.recordCtx(ctx, it.rec), "dead-letter write failed; partition stops here until it succeeds",
		append(c.deadLetterAttrs(it), "dlq_topic", it.rec.Topic+c.cfg.DLQSuffix, "reason", category, "err", err)...)
}

// deadLetterAttrs name a poison record (and the wait it named, when known) in a log line.
func (c *Consumer) deadLetterAttrs(it item) []any {
	var attrs []any
	if len(it.events) > 0 {
		attrs = waitAttrs(it.events[0], "")
	}
	r := it.rec
	return append(attrs, "instance_id", c.cfg.ClientID, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
}

// dlqFailureCategory is the metric reason of a failed dead-letter write.
func dlqFailureCategory(err error) string {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return dlqFailUnknownTopic
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return dlqFailAuthorization
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, kgo.ErrRecordTimeout):
		return dlqFailTimeout
	case errors.Is(err, context.Canceled), errors.Is(err, kgo.ErrClientClosed):
		return dlqFailShutdown
	}
	return dlqFailOther
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
