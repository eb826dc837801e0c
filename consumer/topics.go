package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/workflow"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
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
	var triggerRows []dbsqlc.WorkflowTriggersRow
	if err == nil && c.cfg.Starter != nil {
		triggerRows, err = c.q.WorkflowTriggers(ctx, c.pool)
	}
	if err != nil {
		return fmt.Errorf("load kafka topics: %w", err)
	}
	fields := map[string][]idFields{}
	formats := map[string][]workflow.RecordFormat{}
	addFormat := func(topic string, f workflow.RecordFormat) {
		if f != "" && !slices.Contains(formats[topic], f) {
			formats[topic] = append(formats[topic], f)
		}
	}
	addFields := func(topic string, f idFields) {
		if !slices.Contains(fields[topic], f) {
			fields[topic] = append(fields[topic], f)
		}
	}
	defaults := idFields{exec: workflow.DefaultExecutionIDField, corr: workflow.DefaultCorrelationIDField}
	for _, raw := range rows {
		// Parsed by the definition parser itself, so defaults are the same as the node's.
		ke, err := workflow.ParseKafkaEventFragment(raw)
		if err != nil || ke == nil {
			continue
		}
		addFields(ke.Topic, idFields{exec: ke.ExecutionIDField, corr: ke.CorrelationIDField})
		addFormat(ke.Topic, ke.Format)
	}
	matches := map[string][]aggregator.MatchSpec{}
	for _, raw := range named {
		e, err := workflow.ParseNamedEventFragment(raw)
		if err != nil || e.Source != workflow.SourceKafka {
			continue
		}
		addFormat(e.Topic, e.Format)
		if e.Match == nil {
			// Named Kafka events are correlated by the default id fields.
			addFields(e.Topic, defaults)
			continue
		}
		spec := aggregator.MatchSpec{Type: e.Type, Left: e.Match.Left, Lookback: e.Lookback}
		if !slices.Contains(matches[e.Topic], spec) {
			matches[e.Topic] = append(matches[e.Topic], spec)
		}
	}
	for _, t := range c.cfg.Topics {
		if len(fields[t]) == 0 {
			fields[t] = []idFields{defaults}
		}
	}
	c.mu.Lock()
	// Set before subscribing: the first record of a new topic is read with its configs.
	triggers := map[string][]triggerSpec{}
	for _, row := range triggerRows {
		t, errs := workflow.ParseTrigger(row.Trigger, "triggers")
		if len(errs) > 0 {
			continue // stored definitions were validated; a trigger this build cannot read is skipped
		}
		triggers[t.Topic] = append(triggers[t.Topic], triggerSpec{workflow: row.Name, trigger: t})
		addFormat(t.Topic, t.Format)
	}
	c.fields, c.matches, c.triggers, c.formats, c.loaded = fields, matches, triggers, formats, count
	var added []string
	for _, t := range slices.Concat(slices.Collect(maps.Keys(fields)), slices.Collect(maps.Keys(matches)), slices.Collect(maps.Keys(triggers))) {
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

// refreshLoop re-reads the stored definitions for new topics every TopicRefresh (or at
// once when asked), and makes sure the dead-letter topics of the topics consumed exist.
// Provisioning runs here, not in the poll loop, so that a slow or refusing admin API
// never delays applying records.
func (c *Consumer) refreshLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.TopicRefresh)
	defer t.Stop()
	var stored <-chan struct{} // nil, never ready, without Definitions
	if c.cfg.Definitions != nil {
		stored = c.cfg.Definitions.Stored()
	}
	c.provisionTopics(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.refresh:
		case <-stored:
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
		c.provisionTopics(ctx)
	}
}

// dlqProvisioner remembers, per consumed topic, whether its dead-letter topic is known to
// exist, and what was last logged about it, so that a missing topic or a refused creation
// is logged once, not on every refresh.
type dlqProvisioner struct {
	mu     sync.Mutex
	ready  map[string]bool   // source topic -> its dead-letter topic exists
	absent map[string]bool   // source topic -> its dead-letter topic was found missing
	logged map[string]string // source topic -> the state last logged
}

func newDLQProvisioner() *dlqProvisioner {
	return &dlqProvisioner{ready: map[string]bool{}, absent: map[string]bool{}, logged: map[string]string{}}
}

// missing marks topic's dead-letter topic as not known to exist (a write found it
// missing): the next provisioning looks again.
func (p *dlqProvisioner) missing(topic string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ready, topic)
}

// knownMissing reports whether topic's dead-letter topic was found missing, and could not
// be created, by the last provisioning: a write to it would only wait for the client's
// next metadata refresh to fail.
func (p *dlqProvisioner) knownMissing(topic string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.ready[topic] && p.absent[topic]
}

// pending lists the topics, among topics, whose dead-letter topic is not known to exist.
func (p *dlqProvisioner) pending(topics []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.DeleteFunc(topics, func(t string) bool { return p.ready[t] })
}

// note records topic's state — its dead-letter topic ready, or absent (found missing and
// not created) — and reports whether the state is new, to be logged.
func (p *dlqProvisioner) note(topic, state string, ready, absent bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ready {
		p.ready[topic] = true
	}
	p.absent[topic] = absent
	if p.logged[topic] == state {
		return false
	}
	p.logged[topic] = state
	return true
}

// provisionTimeout bounds one round of provisioning against the admin API.
const provisionTimeout = 10 * time.Second

// provisionTopics makes sure every consumed topic's dead-letter topic exists before a
// poison record needs it, creating it with the source topic's partition count (so a
// dead letter can keep its partition) and the configured replication factor, else
// min(3, brokers). A consumed topic that does not exist yet is logged once: its records
// are read from its beginning once it is created, and its dead-letter topic made then.
// Where creation is refused (ACLs, creation disabled on the cluster), one ERROR per topic
// names the reason and the fix; the partitions of that topic keep going until a poison
// record meets the missing topic, and only that partition stops.
func (c *Consumer) provisionTopics(ctx context.Context) {
	c.mu.Lock()
	sources := slices.Sorted(maps.Keys(c.topics))
	c.mu.Unlock()
	sources = c.dlqTopics.pending(sources)
	if len(sources) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, provisionTimeout)
	defer cancel()
	names := slices.Clone(sources)
	for _, t := range sources {
		names = append(names, t+c.cfg.DLQSuffix)
	}
	topics, brokers, err := c.describeTopics(ctx, names)
	if err != nil {
		c.logger.WarnContext(ctx, "could not read topic metadata to check dead-letter topics; retrying", "err", err, "instance_id", c.cfg.ClientID)
		return
	}
	rf := int16(c.cfg.DLQReplicationFactor)
	if rf == 0 {
		rf = int16(max(1, min(DLQReplicationFactorMax, brokers)))
	}
	adm := kadm.NewClient(c.cl)
	for _, src := range sources {
		dlq := src + c.cfg.DLQSuffix
		partitions := topics[src]
		if partitions == 0 {
			if c.dlqTopics.note(src, "source missing", false, false) {
				c.logger.InfoContext(ctx, "waiting for kafka topic to be created; its records are read from its beginning once it exists",
					"topic", src, "instance_id", c.cfg.ClientID)
			}
			continue
		}
		if topics[dlq] > 0 {
			c.dlqTopics.note(src, "ready", true, false)
			continue
		}
		if c.cfg.SkipDLQTopicCreation {
			if c.dlqTopics.note(src, "dlq missing", false, true) {
				c.logger.ErrorContext(ctx, "dead-letter topic does not exist and topic creation is off: the first poison record of a partition will stop it until the topic is created",
					"topic", src, "dlq_topic", dlq, "instance_id", c.cfg.ClientID,
					"fix", fmt.Sprintf("create %s with %d partitions, or run with --kafka-create-dlq-topics=true and the right to create it", dlq, partitions))
			}
			continue
		}
		_, err := adm.CreateTopic(ctx, partitions, rf, nil, dlq)
		switch {
		case err == nil:
			c.dlqTopics.note(src, "ready", true, false)
			c.logger.InfoContext(ctx, "created dead-letter topic", "topic", src, "dlq_topic", dlq,
				"partitions", partitions, "replication_factor", rf, "instance_id", c.cfg.ClientID)
		case errors.Is(err, kerr.TopicAlreadyExists):
			c.dlqTopics.note(src, "ready", true, false) // another replica made it first
		default:
			if c.dlqTopics.note(src, "refused: "+err.Error(), false, true) {
				c.logger.ErrorContext(ctx, "could not create dead-letter topic: the first poison record of a partition will stop it until the topic exists",
					"topic", src, "dlq_topic", dlq, "err", err, "instance_id", c.cfg.ClientID,
					"fix", fmt.Sprintf("create %s with %d partitions (replication factor %d), or grant this client CREATE on it; --kafka-dlq-replication-factor sets the factor", dlq, partitions, rf))
			}
		}
	}
}

// describeTopics returns the partition count of each of names that exists, and how many
// brokers the cluster has. It asks the cluster, not the client's metadata cache, which
// keeps answering "unknown topic" for a while after a topic is created, and never
// creates a topic.
func (c *Consumer) describeTopics(ctx context.Context, names []string) (map[string]int32, int, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, n := range names {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, 0, err
	}
	out := map[string]int32{}
	for _, t := range resp.Topics {
		if t.Topic != nil && t.ErrorCode == 0 && len(t.Partitions) > 0 {
			out[*t.Topic] = int32(len(t.Partitions))
		}
	}
	return out, len(resp.Brokers), nil
}
