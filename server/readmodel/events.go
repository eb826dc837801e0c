package readmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// The operator's two views of events that reached no wait: the recent unmatched events
// with why, and the buffered events that no wait took before they expired or their
// execution ended (the dead letters). Both page by id, newest first.

// UnmatchedEvent is one row of unmatched_events, for the operator.
type UnmatchedEvent struct {
	ID             int64             `json:"id"`
	Reason         string            `json:"reason"`
	Source         aggregator.Source `json:"source"`
	EventName      string            `json:"event_name,omitempty"`
	EventType      string            `json:"event_type,omitempty"`
	ExecutionID    *uuid.UUID        `json:"execution_id,omitempty"`
	CorrelationID  *uuid.UUID        `json:"correlation_id,omitempty"`
	Detail         string            `json:"detail"`
	PayloadExcerpt string            `json:"payload_excerpt"`
	CreatedAt      time.Time         `json:"created_at"`
	// Resolution is replayed or dismissed once an operator acted on it; the detail says
	// what the replay did, or why it was dismissed.
	Resolution       string     `json:"resolution,omitempty"`
	ResolutionDetail string     `json:"resolution_detail,omitempty"`
	ResolvedAt       *time.Time `json:"resolved_at,omitempty"`
}

// UnmatchedFilter selects unmatched events; zero fields do not filter.
type UnmatchedFilter struct {
	// Reason, when not empty, is one of aggregator.UnmatchedReasons.
	Reason string
	// ExecutionID, when set, keeps the events that named that execution.
	ExecutionID *uuid.UUID
}

// Unmatched returns recent unmatched events, newest first.
func (r *Reader) Unmatched(ctx context.Context, f UnmatchedFilter, pg Paging) (Page[UnmatchedEvent], error) {
	limit, before, err := idPaging(kindUnmatched, pg)
	if err != nil {
		return Page[UnmatchedEvent]{}, err
	}
	p := dbsqlc.UnmatchedEventListParams{Max: int32(limit + 1), ExecutionID: f.ExecutionID, BeforeID: before}
	if p.Reason, err = oneOf("reason", f.Reason, aggregator.UnmatchedReasons); err != nil {
		return Page[UnmatchedEvent]{}, err
	}
	rows, err := read(ctx, r, "unmatched events", func(tx pgx.Tx) ([]dbsqlc.UnmatchedEvent, error) {
		return r.q.UnmatchedEventList(ctx, tx, p)
	})
	if err != nil {
		return Page[UnmatchedEvent]{}, err
	}
	return pageOf(rows, limit, func(u dbsqlc.UnmatchedEvent) (UnmatchedEvent, error) {
		e := UnmatchedEvent{ID: u.ID, Reason: u.Reason, EventName: deref(u.EventName), EventType: deref(u.EventType),
			ExecutionID: u.ExecutionID, CorrelationID: u.CorrelationID, Detail: u.Detail, PayloadExcerpt: u.PayloadExcerpt,
			CreatedAt: u.CreatedAt, Resolution: deref(u.Resolution), ResolutionDetail: deref(u.ResolutionDetail), ResolvedAt: u.ResolvedAt}
		if err := json.Unmarshal(u.Source, &e.Source); err != nil {
			return UnmatchedEvent{}, fmt.Errorf("decode unmatched event source: %w", err)
		}
		return e, nil
	}, func(u dbsqlc.UnmatchedEvent) string { return encodeID(kindUnmatched, u.ID) })
}

// DeadLetter is one buffered event no wait took (event_dead_letters).
type DeadLetter struct {
	ID          int64             `json:"id"`
	ExecutionID uuid.UUID         `json:"execution_id"`
	EventType   string            `json:"event_type"`
	EventID     string            `json:"event_id,omitempty"`
	Payload     json.RawMessage   `json:"payload"`
	Source      aggregator.Source `json:"source"`
	Reason      string            `json:"reason"`
	BufferedAt  time.Time         `json:"buffered_at"`
	CreatedAt   time.Time         `json:"created_at"`
	// Resolution is replayed or dismissed once an operator acted on it; the detail says
	// what the replay did, or why it was dismissed.
	Resolution       string     `json:"resolution,omitempty"`
	ResolutionDetail string     `json:"resolution_detail,omitempty"`
	ResolvedAt       *time.Time `json:"resolved_at,omitempty"`
}

// DeadLetters returns dead-lettered buffered events, newest first, of one execution
// when executionID is not nil.
func (r *Reader) DeadLetters(ctx context.Context, executionID *uuid.UUID, pg Paging) (Page[DeadLetter], error) {
	limit, before, err := idPaging(kindDeadLetters, pg)
	if err != nil {
		return Page[DeadLetter]{}, err
	}
	p := dbsqlc.EventDeadLetterListParams{ExecutionID: executionID, BeforeID: before, Max: int32(limit + 1)}
	rows, err := read(ctx, r, "dead letters", func(tx pgx.Tx) ([]dbsqlc.EventDeadLetter, error) {
		return r.q.EventDeadLetterList(ctx, tx, p)
	})
	if err != nil {
		return Page[DeadLetter]{}, err
	}
	return pageOf(rows, limit, func(d dbsqlc.EventDeadLetter) (DeadLetter, error) {
		l := DeadLetter{ID: d.ID, ExecutionID: d.ExecutionID, EventType: d.EventType, EventID: deref(d.EventID),
			Payload: d.Payload, Reason: d.Reason, BufferedAt: d.BufferedAt, CreatedAt: d.CreatedAt,
			Resolution: deref(d.Resolution), ResolutionDetail: deref(d.ResolutionDetail), ResolvedAt: d.ResolvedAt}
		if err := json.Unmarshal(d.Source, &l.Source); err != nil {
			return DeadLetter{}, fmt.Errorf("decode dead letter source: %w", err)
		}
		return l, nil
	}, func(d dbsqlc.EventDeadLetter) string { return encodeID(kindDeadLetters, d.ID) })
}

// idPaging is the page size and the id to read below (nil on the first page) of a list
// paged by id.
func idPaging(k kind, pg Paging) (int, *int64, error) {
	limit, err := limitOf(pg.Limit)
	if err != nil || pg.Cursor == "" {
		return limit, nil, err
	}
	before, err := decodeID(k, pg.Cursor)
	if err != nil {
		return 0, nil, err
	}
	return limit, &before, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
