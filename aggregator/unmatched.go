package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/startstop"
)

// Why an event matched nothing, as listed by GET /api/v1/events/unmatched and counted
// by rendezvous.events.unmatched. The question users ask most is "why did my event not
// match": every event that was not applied to a wait leaves one of these.
type UnmatchedReason string

// The reasons.
const (
	UnmatchedNoExecution       UnmatchedReason = "no_execution"       // sent to an execution that does not exist
	UnmatchedExecutionFinished UnmatchedReason = "execution_finished" // sent to a finished execution (409)
	UnmatchedBuffered          UnmatchedReason = "buffered"           // no node waits for its type (or payload-match value) yet: held in the buffer
	UnmatchedMatchValueDiffers UnmatchedReason = "match_value_differs"
	UnmatchedFilterFailed      UnmatchedReason = "filter_failed"
	UnmatchedIDMismatch        UnmatchedReason = "id_mismatch"
	UnmatchedDuplicate         UnmatchedReason = "duplicate"
	UnmatchedNoWait            UnmatchedReason = "no_wait"          // ids of no wait
	UnmatchedLate              UnmatchedReason = "late"             // the wait had already ended
	UnmatchedNotExpected       UnmatchedReason = "not_expected"     // the wait does not expect such an event
	UnmatchedAlreadyRecorded   UnmatchedReason = "already_recorded" // the wait holds a different event of that name
)

// UnmatchedReasons lists every reason, for metrics that must exist at zero.
var UnmatchedReasons = []UnmatchedReason{
	UnmatchedNoExecution, UnmatchedExecutionFinished, UnmatchedBuffered, UnmatchedMatchValueDiffers,
	UnmatchedFilterFailed, UnmatchedIDMismatch, UnmatchedDuplicate, UnmatchedNoWait, UnmatchedLate,
	UnmatchedNotExpected, UnmatchedAlreadyRecorded,
}

// unmatchedExcerptBytes bounds the payload kept with an unmatched event.
const unmatchedExcerptBytes = 512

// unmatched is one row of unmatched_events.
type unmatched struct {
	reason        UnmatchedReason
	source        Source
	name, typ     string
	executionID   uuid.UUID
	correlationID uuid.UUID
	detail        string
	payload       []byte
}

// reasonOf maps a decision that applied nothing to its unmatched reason; "" for one
// that applied.
func reasonOf(o Outcome) UnmatchedReason {
	switch o {
	case NotFound:
		return UnmatchedNoWait
	case IDMismatch:
		return UnmatchedIDMismatch
	case FilterMismatch:
		return UnmatchedFilterFailed
	case Duplicate:
		return UnmatchedDuplicate
	case Late:
		return UnmatchedLate
	case NotExpected:
		return UnmatchedNotExpected
	case AlreadyRecorded:
		return UnmatchedAlreadyRecorded
	case NoMatch:
		return UnmatchedMatchValueDiffers
	case Kept:
		return UnmatchedBuffered
	}
	return ""
}

func unmatchedOf(events []Event, results []Result) []unmatched {
	var out []unmatched
	for i, res := range results {
		reason := reasonOf(res.Outcome)
		if reason == "" {
			continue
		}
		ev := events[i]
		u := unmatched{reason: reason, source: ev.Source, name: res.Event, executionID: ev.ExecutionID,
			correlationID: ev.CorrelationID, payload: ev.Payload}
		if u.name == "" {
			u.name = ev.Name
		}
		switch res.Outcome {
		case NoMatch:
			u.detail = "no open wait expects the value this record holds"
		case Kept:
			u.detail = "no open wait expects the value this record holds yet; kept for a wait registering with it until " +
				res.KeptUntil.Format(time.RFC3339)
		case Duplicate:
			if !res.KeptUntil.IsZero() {
				u.detail = "already kept (or taken) under the value it holds: a redelivery"
			}
		case Late:
			u.detail = "the wait is already " + string(res.Status)
		case NotFound:
			u.detail = "no wait has this execution_id and correlation_id"
		case IDMismatch:
			u.detail = "the correlation id belongs to another execution, or the execution has no wait with it"
		}
		if res.NodeID != "" {
			u.detail = join(u.detail, "node "+res.NodeID)
		}
		out = append(out, u)
	}
	return out
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// excerpt cuts a payload to a bounded prefix of valid UTF-8, which a text column needs
// (a payload that reaches here passed CheckStorable; the replacement is a second guard).
func excerpt(b []byte) string {
	if len(b) <= unmatchedExcerptBytes {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	cut := unmatchedExcerptBytes
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return strings.ToValidUTF8(string(b[:cut]), "\uFFFD") + "…"
}

// recordUnmatched writes rows to unmatched_events inside the caller's transaction, so a
// row exists exactly when the decision it explains committed.
func (a *Aggregator) recordUnmatched(ctx context.Context, tx pgx.Tx, rows []unmatched) error {
	if len(rows) == 0 {
		return nil
	}
	var p dbsqlc.UnmatchedEventInsertManyParams
	for _, u := range rows {
		src, err := json.Marshal(u.source)
		if err != nil {
			return err
		}
		p.Reasons = append(p.Reasons, string(u.reason))
		p.Sources = append(p.Sources, src)
		p.EventNames = append(p.EventNames, u.name)
		p.EventTypes = append(p.EventTypes, u.typ)
		p.ExecutionIds = append(p.ExecutionIds, u.executionID)
		p.CorrelationIds = append(p.CorrelationIds, u.correlationID)
		p.Details = append(p.Details, u.detail)
		p.PayloadExcerpts = append(p.PayloadExcerpts, excerpt(u.payload))
	}
	if err := a.q.UnmatchedEventInsertMany(ctx, tx, p); err != nil {
		return fmt.Errorf("record unmatched events: %w", err)
	}
	return nil
}

// countUnmatched counts committed unmatched events by reason.
func (a *Aggregator) countUnmatched(ctx context.Context, reason UnmatchedReason) {
	a.ins.unmatched.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", string(reason))))
}

// UnmatchedRetentionDefault bounds unmatched_events: the newest rows are kept, at most
// this many, none older than the retention of finished executions.
const UnmatchedRetentionDefault = 10_000

// JanitorIntervalDefault is how often buffered events are checked for expiry and
// unmatched events pruned.
const JanitorIntervalDefault = time.Second

// janitorBatch bounds the rows one janitor statement moves or deletes.
const janitorBatch = 1000

// RunJanitor moves expired buffered events to the dead letters, deletes expired early
// records of payload matches, and keeps unmatched_events, event_dead_letters and
// callback_webhook_ids bounded, every
// JanitorInterval until ctx ends.
// Every replica runs it: the statements take small batches and skip locked rows.
func (a *Aggregator) RunJanitor(ctx context.Context) {
	startstop.Every(a.cfg.JanitorInterval, a.cfg.JanitorInterval, func(ctx context.Context) {
		if _, err := a.Janitor(ctx); err != nil && ctx.Err() == nil {
			a.logger.WarnContext(ctx, "event janitor failed; retrying", "err", err, "instance_id", a.cfg.InstanceID)
		}
	})(ctx)
}

// Services are the aggregator's background loops, for the service to start and stop:
// the deadline sweeper, the janitor and the replica's heartbeat.
func (a *Aggregator) Services() []startstop.Service {
	return []startstop.Service{
		startstop.NewLoop("deadline sweeper", a.RunSweeper),
		startstop.NewLoop("event janitor", a.RunJanitor),
		a.heartbeatService(),
	}
}

// Janitor runs one round of RunJanitor and returns how many buffered events expired.
func (a *Aggregator) Janitor(ctx context.Context) (expired int, err error) {
	for {
		rows, err := a.q.EventBufferExpire(ctx, a.pool, dbsqlc.EventBufferExpireParams{Now: a.now().UTC(), Max: janitorBatch})
		if err != nil {
			return expired, fmt.Errorf("expire buffered events: %w", err)
		}
		for _, r := range rows {
			a.logger.WarnContext(ctx, "buffered event expired before any node waited for its type; dead-lettered",
				"execution_id", r.ExecutionID, "event_type", r.EventType, "event_id", deref(r.EventID), "instance_id", a.cfg.InstanceID)
		}
		expired += len(rows)
		if len(rows) > 0 {
			a.ins.buffered.Add(ctx, int64(len(rows)), metric.WithAttributes(attribute.String("outcome", "expired")))
			a.ins.deadLetters.Add(ctx, int64(len(rows)), metric.WithAttributes(attribute.String("reason", "expired")))
		}
		if len(rows) < janitorBatch {
			break
		}
	}
	cutoff := a.now().Add(-a.cfg.UnmatchedMaxAge)
	for {
		n, err := a.q.UnmatchedEventPrune(ctx, a.pool, dbsqlc.UnmatchedEventPruneParams{
			Cutoff: cutoff, Keep: int32(a.cfg.UnmatchedRetention), Max: janitorBatch})
		if err != nil {
			return expired, fmt.Errorf("prune unmatched events: %w", err)
		}
		if n < janitorBatch {
			break
		}
	}
	if err := a.pruneKept(ctx); err != nil {
		return expired, err
	}
	if _, err := a.q.EventDeadLetterDeleteBefore(ctx, a.pool, dbsqlc.EventDeadLetterDeleteBeforeParams{Cutoff: cutoff, Max: janitorBatch}); err != nil {
		return expired, fmt.Errorf("prune dead letters: %w", err)
	}
	for {
		n, err := a.q.WebhookIDPrune(ctx, a.pool, dbsqlc.WebhookIDPruneParams{Cutoff: cutoff, Max: janitorBatch})
		if err != nil {
			return expired, fmt.Errorf("prune webhook-id bindings: %w", err)
		}
		if n < janitorBatch {
			break
		}
	}
	return expired, nil
}
