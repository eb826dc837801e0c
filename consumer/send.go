package consumer

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// The events topic (Config.EventsTopic) is the Kafka form of POST
// /api/v1/executions/{id}/events. Its record value is a JSON object:
//
//	{"execution_id": "<uuid>", "type": "<type>", "payload": <any JSON>, "id": "<id>"}
//
// payload is optional (null). execution_id may instead be given in a record header
// execution_id or X-Execution-Id, so that producers that already route by header need not
// rewrite values; the value's member wins when both are present. type and id are 1 to 200
// characters, and no other member is accepted, as over HTTP. id, when set, deduplicates
// like the HTTP API's. A record without it is identified by its position (topic,
// partition, offset), so that a record redelivered after a crash — applied, its offset
// not yet committed — is a duplicate instead of a second event. A record that can never
// be a sent event (not a JSON object, no type, no valid execution id, …) goes to the
// dead-letter topic with the reason.

// sendAttempts bounds retries of a send or start transaction that hit a deadlock or
// serialization failure (other transactions locking the same executions or waits).
const sendAttempts = 3

// sentShape is how an invalid record is told what is expected.
const sentShape = `a sent event is {"execution_id": "<uuid>", "type": "...", "payload": <JSON>, "id": "..."}`

// decodeSent reads a record of the events topic with the parser the HTTP API reads the
// same object with (aggregator.ParseSent): a member it does not know is refused, not
// ignored. It is pure.
func (c *Consumer) decodeSent(r *kgo.Record) item {
	it := item{rec: r}
	invalid := func(category, reason string) item {
		it.poison, it.poisonCategory = reason, category
		return it
	}
	if len(r.Value) > c.cfg.MaxRecordBytes {
		return invalid(poisonTooLarge, fmt.Sprintf("record value of %d bytes exceeds %d", len(r.Value), c.cfg.MaxRecordBytes))
	}
	w, err := aggregator.ParseSent(r.Value, aggregator.SentRecord)
	we, _ := errors.AsType[*aggregator.SentWireError](err)
	if we != nil {
		switch we.Refusal {
		case aggregator.SentEmpty:
			return invalid(poisonNotJSON, "value is not JSON: it is empty")
		case aggregator.SentNotJSON:
			return invalid(poisonNotJSON, "value is not JSON: "+we.Reason)
		case aggregator.SentNotObject:
			return invalid(poisonInvalidEvent, "value is "+we.Reason+": "+sentShape)
		}
	}
	// A value PostgreSQL cannot store is refused as such before its members are judged:
	// the whole value is checked, as the dead letter's reason says which byte is at fault.
	if err := aggregator.CheckStorable(r.Value); err != nil {
		return invalid(poisonUnstorable, unstorableReason(err))
	}
	if we != nil {
		switch {
		case we.Refusal == aggregator.SentUnknownMember:
			return invalid(poisonInvalidEvent, fmt.Sprintf("unknown member %q: %s", we.Field, sentShape))
		case we.Refusal == aggregator.SentMissingMember:
			return invalid(poisonInvalidEvent, we.Field+" is required: "+sentShape)
		}
		return invalid(poisonInvalidEvent, we.Field+" "+we.Reason)
	}
	execText := w.ExecutionID
	if execText == "" {
		execText = cmp.Or(headerOf(r, workflow.DefaultExecutionIDField), headerOf(r, workflow.DefaultExecutionIDHeader))
		if execText == "" {
			return invalid(poisonInvalidEvent, "no execution_id: give it in the value or in an execution_id or X-Execution-Id header")
		}
	}
	execID, err := uuid.Parse(execText)
	if err != nil {
		return invalid(poisonInvalidEvent, fmt.Sprintf("execution_id %q is not a UUID", execText))
	}
	id := w.ID
	if !w.HasID {
		id = fmt.Sprintf("kafka:%s/%d/%d", r.Topic, r.Partition, r.Offset)
	}
	it.sent = &aggregator.Sent{ExecutionID: execID, Type: w.Type, Payload: w.Payload, ID: id, Source: sourceOf(r), Link: c.linkOf(r)}
	return it
}

// headerOf is the value of r's first header named key, or "".
func headerOf(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// send delivers a batch's sent events in one transaction, apart from apply's: each
// SendTx holds its execution's row lock to the commit. They are sent in execution id
// order — stable, so the events of one execution keep their record order — so that
// concurrent lanes lock executions in one order and cannot deadlock each other.
func (c *Consumer) send(ctx context.Context, items []item) (touchedDB bool, err error) {
	var sends []item
	for _, it := range items {
		if it.sent != nil {
			sends = append(sends, it)
		}
	}
	if len(sends) == 0 {
		return false, nil
	}
	slices.SortStableFunc(sends, func(a, b item) int { return bytes.Compare(a.sent.ExecutionID[:], b.sent.ExecutionID[:]) })
	results := make([]aggregator.SendResult, len(sends))
	for attempt := 1; ; attempt++ {
		err = db.Tx(ctx, c.pool, func(tx pgx.Tx) error {
			for i, it := range sends {
				res, err := c.agg.SendTx(ctx, tx, *it.sent)
				if err != nil {
					return fmt.Errorf("send %s to execution %s: %w", strconv.Quote(it.sent.Type), it.sent.ExecutionID, err)
				}
				results[i] = res
			}
			return nil
		})
		if err == nil || !db.IsRetryable(err) || attempt == sendAttempts {
			break
		}
		c.logger.DebugContext(ctx, "send transaction conflicted; retrying", "err", err, "attempt", attempt, "instance_id", c.cfg.ClientID)
	}
	if err != nil {
		return true, err
	}
	for i, it := range sends {
		res := results[i]
		c.count("send_" + string(res.Outcome))
		c.logSent(linkCtx(ctx, it.sent.Link), *it.sent, res)
	}
	return true, nil
}

// logSent reports what a sent event did. An event for a missing or finished execution is
// not an error of ours — the aggregator records it in unmatched_events — but a producer's
// mistake worth a warning.
func (c *Consumer) logSent(ctx context.Context, s aggregator.Sent, res aggregator.SendResult) {
	attrs := []any{"execution_id", s.ExecutionID, "event_type", s.Type, "event_id", s.ID, "instance_id", c.cfg.ClientID,
		"topic", s.Source.Topic, "partition", *s.Source.Partition, "offset", *s.Source.Offset, "outcome", res.Outcome}
	switch res.Outcome {
	case aggregator.SendDelivered:
		for _, d := range res.Deliveries {
			c.logger.DebugContext(ctx, "sent event delivered", append(attrs, "wait_state_id", d.WaitStateID,
				"node_id", d.NodeID, "event", d.Event, "delivery", d.Outcome)...)
		}
	case aggregator.SendBuffered:
		c.logger.DebugContext(ctx, "sent event buffered until a node waits for its type",
			append(attrs, "expires_at", res.ExpiresAt, "reason", res.Unmatched)...)
	case aggregator.SendDuplicate:
		c.logger.DebugContext(ctx, "sent event ignored: duplicate id", attrs...)
	default:
		c.logger.WarnContext(ctx, "sent event not applied", append(attrs, "reason", res.Unmatched, "execution_status", res.ExecutionStatus)...)
	}
}
