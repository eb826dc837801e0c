package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// Timer makes a Registration a time-based wait (the `wait` node): a wait state with no
// events whose only deadline is the moment it resumes. Being a wait state, it is the
// same durable deadline as an event timeout — it survives restarts, one sweeper fires it,
// and it is cancelled like any wait.
type Timer struct {
	// At is when the wait resumes.
	At time.Time
	// Settings are the node's settings as evaluated (templates rendered), stored with the
	// wait and copied into the node output.
	Settings map[string]any
	// Error, when set, records that the settings could not be evaluated: the wait is
	// stored in status error (so operators see it next to the others) and At is unused.
	Error string
}

// registerTimer stores a timer wait: scheduled until At, or error. Event-wait columns
// keep neutral values (strategy all over no events, onTimeout fail); nothing reads them
// for a timer.
func (a *Aggregator) registerTimer(ctx context.Context, tx pgx.Tx, r Registration) (dbsqlc.ExecutionWaitState, error) {
	t := r.Timer
	settings, err := json.Marshal(t.Settings)
	if err != nil {
		return dbsqlc.ExecutionWaitState{}, fmt.Errorf("encode timer settings: %w", err)
	}
	now := a.now().UTC().Truncate(time.Microsecond)
	at, status, reason := t.At.UTC().Truncate(time.Microsecond), vocab.WaitScheduled, (*string)(nil)
	if t.Error != "" {
		at, status, reason = now, vocab.WaitError, &t.Error
	}
	ws, err := a.q.WaitStateInsert(ctx, tx, dbsqlc.WaitStateInsertParams{
		ID:                  db.NewID(),
		ExecutionID:         r.ExecutionID,
		NodeID:              r.NodeID,
		CorrelationID:       r.CorrelationID,
		AggregationStrategy: string(vocab.StrategyAll),
		RequiredEvents:      []byte("[]"),
		EnabledEvents:       []byte("[]"),
		ExpectedEvents:      []byte("[]"),
		OnTimeout:           string(vocab.OnTimeoutFail),
		OutputMapping:       []byte("{}"),
		ExpiresAt:           at,
		NextDeadlineAt:      at,
		WaitType:            string(vocab.WaitTypeTimer),
		RegisteredBy:        a.cfg.InstanceID,
		Timer:               settings,
		Status:              string(status),
		Error:               reason,
		TraceParent:         nonEmpty(r.TraceParent),
	})
	if err != nil {
		return dbsqlc.ExecutionWaitState{}, fmt.Errorf("insert timer wait: %w", db.Interpret(err))
	}
	if status == vocab.WaitScheduled {
		db.AfterCommit(tx, func() { a.deadlineRegistered(at) })
	}
	return ws, nil
}

// TimerOutput is the node output of a timer wait: its settings, when it was scheduled
// for, and what ended it — resumed_at when it fired, cancelled when it was cancelled.
func TimerOutput(ws dbsqlc.ExecutionWaitState) (map[string]any, error) {
	out := map[string]any{}
	if len(ws.Timer) > 0 {
		var settings map[string]any
		if err := json.Unmarshal(ws.Timer, &settings); err != nil {
			return nil, fmt.Errorf("decode timer of wait %s: %w", ws.ID, err)
		}
		maps.Copy(out, settings)
	}
	out["wait_type"] = string(vocab.WaitTypeTimer)
	out["scheduled_for"] = ws.ExpiresAt.UTC()
	return out, nil
}

// timerDecision is the sweeper's write for a due timer: resumed, node completed with
// its output, continuation enqueued (by writeWaits).
func timerDecision(row dbsqlc.ExecutionWaitState, now time.Time) ([]byte, error) {
	out, err := TimerOutput(row)
	if err != nil {
		return nil, err
	}
	out["resumed_at"] = now.UTC()
	return json.Marshal(out)
}
