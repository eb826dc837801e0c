package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// waitWrite is one decided wait as writeWaits writes it: an event recorded, a deadline
// passed, a wait cancelled. Nil byte slices keep what the row holds.
type waitWrite struct {
	id      uuid.UUID
	version int64 // the version the decision was based on: the fence
	bump    int64 // how many changes the write applies (0: only the next deadline moves)
	status  vocab.WaitStatus

	received, timedOut, apiResponse, kafkaEvent, eventData []byte
	next                                                   time.Time
	reason                                                 string // the wait's error; "" keeps it

	// end, when set, ends the wait: its node's outcome, and what becomes of its
	// continuation.
	end *waitEnd
}

// waitEnd is what a wait that ends hands on: its node's outcome, and its continuation.
type waitEnd struct {
	nodeStatus vocab.NodeStatus // completed to continue, failed to fail
	output     []byte
	nodeError  string
	warning    string
	then       continuation
}

// outcome is the node's outcome as the write of the wait leaves it (nil for no end).
func (e *waitEnd) outcome() *NodeOutcome {
	if e == nil {
		return nil
	}
	return &NodeOutcome{Status: e.nodeStatus, Output: e.output, Error: e.nodeError, Warning: e.warning}
}

// continuation says who continues the execution of a wait that ends.
type continuation string

const (
	// queueResume: a resume row, for the executor's workers.
	queueResume continuation = "queue"
	// continueHere: the Continuer, in this transaction; the wait is marked resumed by
	// this instance in the same write, so no one else resumes it.
	continueHere continuation = "here"
	// continueByCaller: the caller, at once, in this transaction (a wait cancelled to
	// continue); nothing is queued or marked.
	continueByCaller continuation = "caller"
)

// written is a wait writeWaits wrote (its fence held).
type written struct {
	id    uuid.UUID
	ended *Ended // set when the write ended the wait
	then  continuation
}

// writeWaits is a pipeline call writing decided waits with one statement
// (WaitStateWrite), each behind its version fence, into out (the waits whose fence held).
// It is the one writer of "this wait ended": every path that ends a wait — events,
// deadlines, a cancel that continues — goes through it, and the statement finishes the
// node and queues or marks the continuation in the same write, so a wait can neither end
// without its node's outcome nor be continued twice.
func (a *Aggregator) writeWaits(ctx context.Context, ws []waitWrite, out *[]written) func(dbsqlc.DBTX) error {
	// Each column's array is sized once: a sweeper batch writes thousands of waits, and
	// growing sixteen slices by appending would copy each of them again and again.
	n := len(ws)
	p := dbsqlc.WaitStateWriteParams{
		InstanceID: a.cfg.InstanceID,
		Ids:        make([]uuid.UUID, 0, n), Versions: make([]int64, 0, n), Bumps: make([]int64, 0, n),
		Statuses: make([]string, 0, n), ReceivedEvents: make([]json.RawMessage, 0, n),
		TimedOutEvents: make([]json.RawMessage, 0, n), ApiResponseData: make([]json.RawMessage, 0, n),
		KafkaEventData: make([]json.RawMessage, 0, n), EventData: make([]json.RawMessage, 0, n),
		NextDeadlines: make([]time.Time, 0, n), Errors: make([]string, 0, n), NodeStatuses: make([]string, 0, n),
		Outputs: make([]json.RawMessage, 0, n), NodeErrors: make([]string, 0, n), Warnings: make([]string, 0, n),
		Continuations: make([]string, 0, n),
	}
	for _, w := range ws {
		end := w.end
		if end == nil {
			end = &waitEnd{}
		}
		p.Ids = append(p.Ids, w.id)
		p.Versions = append(p.Versions, w.version)
		p.Bumps = append(p.Bumps, w.bump)
		p.Statuses = append(p.Statuses, string(w.status))
		p.ReceivedEvents = append(p.ReceivedEvents, w.received)
		p.TimedOutEvents = append(p.TimedOutEvents, w.timedOut)
		p.ApiResponseData = append(p.ApiResponseData, w.apiResponse)
		p.KafkaEventData = append(p.KafkaEventData, w.kafkaEvent)
		p.EventData = append(p.EventData, w.eventData)
		p.NextDeadlines = append(p.NextDeadlines, w.next)
		p.Errors = append(p.Errors, w.reason)
		p.NodeStatuses = append(p.NodeStatuses, string(end.nodeStatus))
		p.Outputs = append(p.Outputs, end.output)
		p.NodeErrors = append(p.NodeErrors, end.nodeError)
		p.Warnings = append(p.Warnings, end.warning)
		p.Continuations = append(p.Continuations, string(end.then))
	}
	return func(d dbsqlc.DBTX) error {
		rows, err := a.q.WaitStateWrite(ctx, d, p)
		if err != nil {
			return fmt.Errorf("write waits: %w", err)
		}
		*out = make([]written, len(rows))
		// By wait, built for the first wait continued here: that continuation takes its
		// node's outcome from the write (Ended.Outcome); a queued one reads it later.
		var ends map[uuid.UUID]*waitEnd
		for i, r := range rows {
			then := continuation(r.Continuation)
			(*out)[i] = written{id: r.ID, then: then}
			if r.NodeStatus == "" {
				continue
			}
			ended := &Ended{ExecutionID: r.ExecutionID, NodeID: r.NodeID, WaitType: vocab.WaitType(r.WaitType),
				Strategy: vocab.Strategy(r.AggregationStrategy), Status: vocab.WaitStatus(r.Status), CreatedAt: r.CreatedAt, EndedAt: r.UpdatedAt,
				TraceParent: deref(r.TraceParent)}
			if then == continueHere {
				if ends == nil {
					ends = make(map[uuid.UUID]*waitEnd, len(ws))
					for j := range ws {
						if ws[j].end != nil {
							ends[ws[j].id] = ws[j].end
						}
					}
				}
				ended.Outcome = ends[r.ID].outcome()
			}
			(*out)[i].ended = ended
		}
		return nil
	}
}

// writeWaitsNow runs writeWaits' statement on tx at once, for a batch of waits. It goes
// through a pipeline, which sizes the connection's send buffer for the batch's arrays
// before pgx encodes them there. Sent on tx directly, the buffer grew by copying as each
// array was appended (allocations per wait of rendezvous-bench part e).
func (a *Aggregator) writeWaitsNow(ctx context.Context, tx pgx.Tx, ws []waitWrite, out *[]written) error {
	var p db.Pipeline
	p.Queue(a.writeWaits(ctx, ws, out))
	return p.Send(ctx, tx)
}

// writtenAhead is what writeWaits returns for ws, the writes of waits in that order, if
// every fence holds; at stands for the moment of the write, which only the server knows.
func writtenAhead(waits []*wait, ws []waitWrite, at time.Time) []written {
	out := make([]written, len(ws))
	for i, ww := range ws {
		out[i] = written{id: ww.id}
		if ww.end == nil {
			continue
		}
		row := &waits[i].row
		out[i].then = ww.end.then
		out[i].ended = &Ended{ExecutionID: row.ExecutionID, NodeID: row.NodeID, WaitType: row.WaitType,
			Strategy: row.AggregationStrategy, Status: ww.status, CreatedAt: row.CreatedAt, EndedAt: at,
			TraceParent: deref(row.TraceParent), Outcome: ww.end.outcome()}
	}
	return out
}

// endedHere are the waits of out that ended to be continued here (continueHere).
func endedHere(out []written) []Ended {
	n := 0
	for _, w := range out {
		if w.ended != nil && w.then == continueHere {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	// Counted first: a batch of Kafka records ends most of its waits, and Ended is large
	// enough that growing the slice by appending copied them several times over.
	ended := make([]Ended, 0, n)
	for _, w := range out {
		if w.ended != nil && w.then == continueHere {
			ended = append(ended, *w.ended)
		}
	}
	return ended
}
