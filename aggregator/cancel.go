package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// WaitFinishedError is returned when a wait to cancel is no longer waiting.
type WaitFinishedError struct{ Status vocab.WaitStatus }

func (e *WaitFinishedError) Error() string { return "wait is already " + string(e.Status) }

// CancelWait cancels one open wait inside the caller's transaction: the row is locked,
// then moved to cancelled behind its version fence, so an event racing the cancel either
// was recorded first (and the cancel reports the wait finished if it completed it) or
// finds the wait cancelled and is late. Its unsent correlated call is dropped. The node
// ends with the wait, in the same write (writeWaits): with cont, completed with the
// output the wait hands on — what arrived so far, cancelled: true — which is returned
// for the caller to continue the workflow from at once, in tx; without, failed with
// reason.
func (a *Aggregator) CancelWait(ctx context.Context, tx pgx.Tx, executionID uuid.UUID, nodeID, reason string, cont bool) (json.RawMessage, error) {
	row, err := a.q.WaitStateGetByNodeForUpdate(ctx, tx, dbsqlc.WaitStateGetByNodeForUpdateParams{ExecutionID: executionID, NodeID: nodeID})
	if err != nil {
		return nil, fmt.Errorf("load wait: %w", db.Interpret(err))
	}
	if !Open(row.Status) {
		return nil, &WaitFinishedError{Status: row.Status}
	}
	end := &waitEnd{nodeStatus: vocab.NodeFailed, nodeError: reason, then: continueByCaller}
	if cont {
		out, err := cancelledOutput(row)
		if err != nil {
			return nil, err
		}
		if end.output, err = json.Marshal(out); err != nil {
			return nil, err
		}
		end.nodeStatus, end.nodeError = vocab.NodeCompleted, ""
	}
	var written []written
	if err := a.writeWaits(ctx, []waitWrite{{id: row.ID, version: row.Version, bump: 1, status: vocab.WaitCancelled,
		next: row.NextDeadlineAt, reason: reason, end: end}}, &written)(tx); err != nil {
		return nil, fmt.Errorf("cancel wait: %w", err)
	}
	if len(written) == 0 {
		return nil, errors.New("cancel wait: version fence missed on a locked row")
	}
	if err := a.q.OutboxDeleteForWaitState(ctx, tx, row.ID); err != nil {
		return nil, fmt.Errorf("drop unsent call: %w", err)
	}
	a.logger.InfoContext(ctx, "wait cancelled", "execution_id", executionID, "correlation_id", row.CorrelationID,
		"node_id", nodeID, "instance_id", a.cfg.InstanceID, "reason", reason)
	return end.output, nil
}

// CancelOpenWaits cancels every open wait of an execution that is ending (failed or
// cancelled) inside the caller's transaction, which holds the execution's row. The
// version moves, so an event decided against an open wait misses its fence, reads the
// row again and finds it cancelled. The nodes are the caller's: the execution cancels
// them all.
func (a *Aggregator) CancelOpenWaits(ctx context.Context, tx pgx.Tx, executionID uuid.UUID, reason string) error {
	if _, err := a.q.WaitStateCancelOpenForExecution(ctx, tx, dbsqlc.WaitStateCancelOpenForExecutionParams{
		ExecutionID: executionID, Error: reason,
	}); err != nil {
		return fmt.Errorf("cancel open waits: %w", err)
	}
	return nil
}

// cancelledOutput is what a cancelled wait hands on: for an event wait what arrived so
// far, for a timer its settings, when it was due and when it moved on; cancelled: true
// either way.
func cancelledOutput(row dbsqlc.ExecutionWaitState) (map[string]any, error) {
	var out map[string]any
	if row.WaitType == vocab.WaitTypeTimer {
		var err error
		if out, err = TimerOutput(row); err != nil {
			return nil, err
		}
		// Used only when the workflow continues, which it does now: downstream nodes see
		// the same fields as after a fire.
		out["resumed_at"] = time.Now().UTC()
	} else {
		w, err := decodeWait(row)
		if err != nil {
			return nil, err
		}
		if err := w.decodeExpected(); err != nil {
			return nil, err
		}
		// Cut short like a deadline, so it says the same about what is missing.
		missing := missingRequired(row.AggregationStrategy, w.expected, w.required, w.receivedNames())
		raw, err := Output(row, w.received, w.timedOut, false, missing)
		if err != nil {
			return nil, err
		}
		// Decoded to add what a cancellation says of itself; numbers stay exact.
		v, err := jsonnum.Decode(raw)
		if err != nil {
			return nil, err
		}
		out = v.(map[string]any)
	}
	out["cancelled"] = true
	return out, nil
}
