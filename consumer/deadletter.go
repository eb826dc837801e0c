package consumer

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Dead-letter headers.
const (
	HeaderReason    = "rendezvous-dlq-reason"
	HeaderTopic     = "rendezvous-dlq-topic"
	HeaderPartition = "rendezvous-dlq-partition"
	HeaderOffset    = "rendezvous-dlq-offset"
	HeaderFirstSeen = "rendezvous-dlq-first-seen"
)

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
