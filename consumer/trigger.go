package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/internal/dotpath"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// Starter starts an execution in a transaction the caller commits: the executor. A
// trigger's start and the record of its dedupe key commit together.
type Starter interface {
	StartTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, workflow string, input json.RawMessage) (executor.Started, error)
}

// Definitions signals that a definition was stored (executor.Executor.Stored).
type Definitions interface {
	Stored() <-chan struct{}
}

// TriggerOutcome is what a record a trigger accepted did, counted like the others.
type TriggerOutcome string

// The outcomes.
const (
	// OutcomeStarted: the record started an execution.
	OutcomeStarted TriggerOutcome = "started"
	// OutcomeTriggerDuplicate: the record's dedupe key already started an execution of
	// the workflow (a redelivery, or a record produced again), so it started nothing.
	OutcomeTriggerDuplicate TriggerOutcome = "trigger_duplicate"
)

// triggerSpec is a stored workflow's trigger on one topic.
type triggerSpec struct {
	workflow string
	trigger  workflow.Trigger
}

// start is an execution a record asks a trigger for.
type start struct {
	workflow string
	input    json.RawMessage
	// dedupe is the key that makes the start happen once: "k:" and the value a dedupe
	// key names, or "p:" and the record's position.
	dedupe string
}

// triggersFor returns the triggers of topic's records.
func (c *Consumer) triggersFor(topic string) []triggerSpec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.triggers[topic]
}

// starts lists the executions r asks for: one per trigger of its topic whose type and
// filter the record's value (payload, decoded) holds; key is its key as read (readKey).
// It is pure.
func (c *Consumer) starts(r *kgo.Record, key, payload any) ([]start, error) {
	var out []start
	for _, spec := range c.triggersFor(r.Topic) {
		t := spec.trigger
		if !aggregator.HoldsTypeAndFilter(payload, t.Type, t.Filter) {
			continue
		}
		dedupe := fmt.Sprintf("p:%s/%d/%d", r.Topic, r.Partition, r.Offset)
		if t.DedupeKey != nil {
			// A record that lacks its dedupe key is still started, once: by position.
			if v, ok := recordPart(r, key, payload, *t.DedupeKey); ok && v != nil {
				dedupe = "k:" + keyText(v)
			}
		}
		input, err := triggerInput(r, key, payload, t, dedupe)
		if err != nil {
			return nil, err
		}
		out = append(out, start{workflow: spec.workflow, input: input, dedupe: dedupe})
	}
	return out, nil
}

// triggerInput is the execution input a trigger builds from r: its mapping, else the
// value (an object) or {"value": value}, and always _record, naming the record.
func triggerInput(r *kgo.Record, key, payload any, t workflow.Trigger, dedupe string) (json.RawMessage, error) {
	in := map[string]any{}
	switch {
	case t.Input != nil:
		for k, ref := range t.Input {
			v, _ := recordPart(r, key, payload, ref)
			in[k] = v
		}
	default:
		if m, ok := payload.(map[string]any); ok {
			for k, v := range m {
				in[k] = v
			}
		} else {
			in["value"] = payload
		}
	}
	rec := map[string]any{
		"topic": r.Topic, "partition": r.Partition, "offset": r.Offset,
		"timestamp": r.Timestamp.UTC().Format(time.RFC3339Nano), "dedupe_key": dedupe,
	}
	if key != nil {
		rec["key"] = key
	}
	in[workflow.RecordInputKey] = rec
	return json.Marshal(in)
}

// recordPart reads the part of r a reference names (key: its key as read); ok is false
// when it is absent.
func recordPart(r *kgo.Record, key, payload any, ref workflow.RecordRef) (any, bool) {
	switch ref.Part {
	case workflow.RecordValue:
		if ref.Path == "" {
			return payload, true
		}
		return dotpath.Get(payload, ref.Path)
	case workflow.RecordKey:
		if key == nil {
			return nil, false
		}
		return key, true
	case workflow.RecordHeader:
		for _, h := range r.Headers {
			if h.Key == ref.Path {
				return string(h.Value), true
			}
		}
		return nil, false
	case workflow.RecordTopic:
		return r.Topic, true
	case workflow.RecordPartition:
		return r.Partition, true
	case workflow.RecordOffset:
		return r.Offset, true
	case workflow.RecordTimestamp:
		return r.Timestamp.UTC().Format(time.RFC3339Nano), true
	}
	return nil, false
}

// keyText is a dedupe key's text: a string as is, a number exactly as written, anything
// else as JSON.
func keyText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		if n, ok := jsonnum.Of(x); ok {
			return n.String()
		}
		return x.String()
	}
	raw, _ := json.Marshal(v)
	return string(raw)
}

// trigger starts the executions a batch's records ask for, in one transaction and in
// record order: each start claims its dedupe key, and only a start that claimed it
// inserts its execution. A record seen again finds its key claimed and starts nothing;
// so does a record produced twice with the same dedupe key value.
func (c *Consumer) trigger(ctx context.Context, items []item) (touchedDB bool, err error) {
	type started struct {
		it    item
		s     start
		id    uuid.UUID
		isNew bool
	}
	var todo []started
	for _, it := range items {
		if it.poison != "" {
			continue
		}
		for _, s := range it.starts {
			todo = append(todo, started{it: it, s: s})
		}
	}
	if len(todo) == 0 || c.cfg.Starter == nil {
		return false, nil
	}
	for attempt := 1; ; attempt++ {
		err = db.Tx(ctx, c.pool, func(tx pgx.Tx) error {
			for i := range todo {
				t := &todo[i]
				r := t.it.rec
				id := db.NewID()
				claimed, err := c.q.ExecutionTriggerClaim(ctx, tx, dbsqlc.ExecutionTriggerClaimParams{
					WorkflowName: t.s.workflow, DedupeKey: t.s.dedupe, ExecutionID: id,
					Topic: r.Topic, KafkaPartition: r.Partition, KafkaOffset: r.Offset,
				})
				if errors.Is(db.Interpret(err), db.ErrNotFound) {
					t.id, t.isNew = uuid.Nil, false // claimed before: a record seen again
					continue
				}
				if err != nil {
					return fmt.Errorf("claim trigger key: %w", err)
				}
				if _, err := c.cfg.Starter.StartTx(ctx, tx, claimed, t.s.workflow, t.s.input); err != nil {
					return fmt.Errorf("start %s: %w", t.s.workflow, err)
				}
				t.id, t.isNew = claimed, true
			}
			return nil
		})
		if err == nil || !db.IsRetryable(err) || attempt == sendAttempts {
			break
		}
	}
	if err != nil {
		return true, err
	}
	debug := c.logger.Enabled(ctx, slog.LevelDebug)
	for _, t := range todo {
		r := t.it.rec
		outcome := OutcomeTriggerDuplicate
		if t.isNew {
			outcome = OutcomeStarted
		}
		c.count(string(outcome))
		c.ins.triggered.Add(ctx, 1, metric.WithAttributes(attribute.String("workflow", t.s.workflow), attribute.String("outcome", string(outcome))))
		if !debug {
			continue // the line's attributes and the record's trace are built only for a line
		}
		attrs := []any{"workflow", t.s.workflow, "dedupe_key", t.s.dedupe, "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "instance_id", c.cfg.ClientID}
		if t.isNew {
			c.logger.DebugContext(c.recordCtx(ctx, r), "kafka record started an execution", append(attrs, "execution_id", t.id)...)
		} else {
			c.logger.DebugContext(c.recordCtx(ctx, r), "kafka record's trigger key already started an execution", attrs...)
		}
	}
	return true, nil
}
