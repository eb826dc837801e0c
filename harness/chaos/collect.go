package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Observed is what the checks read once the run is quiet: the database, the fake
// service and the broker. The checks never take the service's word for what should have
// happened; they compare this with the plan and the driver's log.
type Observed struct {
	Executions []ObservedExecution `json:"-"`
	// Waits and Nodes are keyed by execution id.
	Waits         map[uuid.UUID]ObservedWait            `json:"-"`
	Nodes         map[uuid.UUID]map[string]ObservedNode `json:"-"`
	Calls         []Call                                `json:"-"`
	Continuations []Continuation                        `json:"-"`
	Malformed     []string                              `json:"malformed,omitempty"`
	// Lag is end offset minus committed offset per partition ("topic/partition").
	Lag map[string]int64 `json:"lag"`
	// LagErr says why Lag could not be read.
	LagErr   string `json:"lag_err,omitempty"`
	RunQueue int    `json:"run_queue"`
	Outbox   int    `json:"outbox"`
	// Buffered counts events sent by type still held for a wait; DeadLetters maps the id
	// of each event sent by type that no wait took to why it was moved out.
	Buffered int `json:"buffered"`
	// KeptTaken counts records matched by payload that reached no wait, were kept for a
	// lookback and taken by a wait registering later (the rest of the early ones arrived
	// live).
	KeptTaken   int               `json:"kept_taken"`
	DeadLetters map[string]string `json:"-"`
	// SentUnmatched maps the position ("partition/offset") of a record of SentTopic to
	// the reasons unmatched_events gives for it: one per application no wait took.
	SentUnmatched map[string][]string `json:"-"`
	// Triggered holds, per trigger key, the executions the trigger stream started.
	Triggered map[int]ObservedTrigger `json:"-"`
	// Redrives holds the audit log's rows of the redrives, per execution.
	Redrives map[uuid.UUID]AuditedRedrives `json:"-"`
}

// AuditedRedrives counts the audit log's rows of the redrives of one execution: those
// written in the transaction of a redrive that took effect (outcome ok, target
// execution/<id>), those of a redrive refused with 409 (outcome "refused 409", target the
// request's path), those of a redrive that failed because the database was away
// (outcome "failed 503", written once it was back), any other outcome, and who made them.
type AuditedRedrives struct {
	OK          int
	Refused409  int
	Unavailable int
	Other       []string
	Principals  []string
}

// position names a record of one topic.
func position(partition int32, offset int64) string { return fmt.Sprintf("%d/%d", partition, offset) }

// ObservedExecution is a row of executions.
type ObservedExecution struct {
	ID       uuid.UUID
	Workflow string
	Status   string
	Error    string
	// Plan is the plan index the driver put in the input (-1 when absent).
	Plan int
	// RedriveCount is how often it was redriven.
	RedriveCount int
}

// ObservedWait is the wait node's row of execution_wait_states.
type ObservedWait struct {
	ExecutionID   uuid.UUID
	CorrelationID uuid.UUID
	Status        string
	Version       int64
	Received      []ReceivedEvent
	TimedOut      []string
	APIData       json.RawMessage
	KafkaData     json.RawMessage
	MatchData     json.RawMessage // event_data of EventMatch
	SendData      json.RawMessage // event_data of EventSend
	ResumedAt     *time.Time
	ResumedBy     string
	Strategy      string
	OnTimeout     string
	Required      []string
	Enabled       []string
}

// ReceivedEvent is one entry of received_events.
type ReceivedEvent struct {
	Name       string    `json:"name"`
	ReceivedAt time.Time `json:"received_at"`
	Key        string    `json:"key"`
	Source     struct {
		Kind      string `json:"kind"`
		Service   string `json:"service"`
		Topic     string `json:"topic"`
		Partition *int32 `json:"partition"`
		Offset    *int64 `json:"offset"`
	} `json:"source"`
}

// ObservedNode is a row of node_executions.
type ObservedNode struct {
	Status   string
	Attempts int
	Error    string
	Warning  string
}

// collect reads the run's database, the fake service and the consumer group's offsets.
func collect(ctx context.Context, pool *pgxpool.Pool, fk *fake, cl *cluster) (Observed, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	obs := Observed{Waits: map[uuid.UUID]ObservedWait{}, Nodes: map[uuid.UUID]map[string]ObservedNode{}}

	rows, err := pool.Query(ctx, `SELECT id, workflow_name, status, coalesce(error, ''), coalesce((input->>'chaos_plan')::int, -1), redrive_count FROM executions`)
	if err != nil {
		return obs, fmt.Errorf("read executions: %w", err)
	}
	for rows.Next() {
		var e ObservedExecution
		if err := rows.Scan(&e.ID, &e.Workflow, &e.Status, &e.Error, &e.Plan, &e.RedriveCount); err != nil {
			rows.Close()
			return obs, fmt.Errorf("read executions: %w", err)
		}
		obs.Executions = append(obs.Executions, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return obs, fmt.Errorf("read executions: %w", err)
	}

	if obs.Triggered, err = collectTriggers(ctx, pool); err != nil {
		return obs, err
	}

	rows, err = pool.Query(ctx, `SELECT execution_id, correlation_id, status, version, received_events, timed_out_events,
		api_response_data, kafka_event_data, event_data -> $1::text, event_data -> $2::text, resumed_at, coalesce(resumed_by, ''),
		aggregation_strategy, on_timeout, required_events, enabled_events
		FROM execution_wait_states WHERE node_id = 'wait'`, EventMatch, EventSend)
	if err != nil {
		return obs, fmt.Errorf("read wait states: %w", err)
	}
	for rows.Next() {
		var w ObservedWait
		var received, timedOut, required, enabled []byte
		if err := rows.Scan(&w.ExecutionID, &w.CorrelationID, &w.Status, &w.Version, &received, &timedOut,
			&w.APIData, &w.KafkaData, &w.MatchData, &w.SendData, &w.ResumedAt, &w.ResumedBy, &w.Strategy, &w.OnTimeout, &required, &enabled); err != nil {
			rows.Close()
			return obs, fmt.Errorf("read wait states: %w", err)
		}
		for _, part := range []struct {
			raw []byte
			dst any
		}{{received, &w.Received}, {timedOut, &w.TimedOut}, {required, &w.Required}, {enabled, &w.Enabled}} {
			if len(part.raw) == 0 {
				continue
			}
			if err := json.Unmarshal(part.raw, part.dst); err != nil {
				rows.Close()
				return obs, fmt.Errorf("decode wait state of %s: %w", w.ExecutionID, err)
			}
		}
		obs.Waits[w.ExecutionID] = w
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return obs, fmt.Errorf("read wait states: %w", err)
	}

	rows, err = pool.Query(ctx, `SELECT execution_id, node_id, status, attempts, coalesce(error, ''), coalesce(warning, '') FROM node_executions`)
	if err != nil {
		return obs, fmt.Errorf("read node executions: %w", err)
	}
	for rows.Next() {
		var id uuid.UUID
		var node string
		var n ObservedNode
		if err := rows.Scan(&id, &node, &n.Status, &n.Attempts, &n.Error, &n.Warning); err != nil {
			rows.Close()
			return obs, fmt.Errorf("read node executions: %w", err)
		}
		if obs.Nodes[id] == nil {
			obs.Nodes[id] = map[string]ObservedNode{}
		}
		obs.Nodes[id][node] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return obs, fmt.Errorf("read node executions: %w", err)
	}

	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM run_queue), (SELECT count(*) FROM outbox), (SELECT count(*) FROM event_buffer),
		(SELECT count(*) FROM match_lookback WHERE status = 'taken')`).
		Scan(&obs.RunQueue, &obs.Outbox, &obs.Buffered, &obs.KeptTaken); err != nil {
		return obs, fmt.Errorf("read queues: %w", err)
	}
	rows, err = pool.Query(ctx, `SELECT coalesce(event_id, ''), reason FROM event_dead_letters`)
	if err != nil {
		return obs, fmt.Errorf("read event dead letters: %w", err)
	}
	obs.DeadLetters = map[string]string{}
	for rows.Next() {
		var id, reason string
		if err := rows.Scan(&id, &reason); err != nil {
			rows.Close()
			return obs, fmt.Errorf("read event dead letters: %w", err)
		}
		obs.DeadLetters[id] = reason
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return obs, fmt.Errorf("read event dead letters: %w", err)
	}
	rows, err = pool.Query(ctx, `SELECT (source->>'partition')::int, (source->>'offset')::bigint, reason
		FROM unmatched_events WHERE source->>'topic' = $1 ORDER BY id`, SentTopic)
	if err != nil {
		return obs, fmt.Errorf("read unmatched sent records: %w", err)
	}
	obs.SentUnmatched = map[string][]string{}
	for rows.Next() {
		var partition int32
		var offset int64
		var reason string
		if err := rows.Scan(&partition, &offset, &reason); err != nil {
			rows.Close()
			return obs, fmt.Errorf("read unmatched sent records: %w", err)
		}
		at := position(partition, offset)
		obs.SentUnmatched[at] = append(obs.SentUnmatched[at], reason)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return obs, fmt.Errorf("read unmatched sent records: %w", err)
	}
	if obs.Redrives, err = collectRedrives(ctx, pool); err != nil {
		return obs, err
	}
	obs.Calls, obs.Continuations, obs.Malformed = fk.snapshot()
	if obs.Lag, err = cl.lag(ctx); err != nil {
		// The broker is part of what is under test: a broken one is a finding, not a
		// reason to give up on the other checks.
		obs.LagErr = err.Error()
	}
	return obs, nil
}

// collectRedrives reads the audit log's rows of the redrives of single executions.
func collectRedrives(ctx context.Context, pool *pgxpool.Pool) (map[uuid.UUID]AuditedRedrives, error) {
	rows, err := pool.Query(ctx, `SELECT target, outcome, principal FROM audit_log WHERE action = 'execution.redrive' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read the audit log: %w", err)
	}
	defer rows.Close()
	out := map[uuid.UUID]AuditedRedrives{}
	for rows.Next() {
		var target, outcome, principal string
		if err := rows.Scan(&target, &outcome, &principal); err != nil {
			return nil, fmt.Errorf("read the audit log: %w", err)
		}
		// ok rows name execution/<id>; refused ones the path /api/v1/executions/<id>/redrive.
		raw := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(target, "execution/"), "/api/v1/executions/"), "/redrive")
		id, err := uuid.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("audit row of a redrive with target %q", target)
		}
		a := out[id]
		switch outcome {
		case "ok":
			a.OK++
		case "refused 409":
			a.Refused409++
		case "failed 503":
			a.Unavailable++
		default:
			a.Other = append(a.Other, outcome)
		}
		if !slices.Contains(a.Principals, principal) {
			a.Principals = append(a.Principals, principal)
		}
		out[id] = a
	}
	return out, rows.Err()
}
