package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/internal/workflow"
)

// idFields is one way a topic's records carry their ids.
type idFields struct{ exec, corr string }

// Refresh asks Run to re-read the topics of stored definitions now (called after a
// definition is stored on this replica).
func (c *Consumer) Refresh() {
	select {
	case c.refresh <- struct{}{}:
	default:
	}
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
