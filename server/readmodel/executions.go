package readmodel

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// ExecutionStatuses are the statuses an execution can have, the values of the execution
// list's status filter.
var ExecutionStatuses = []vocab.ExecutionStatus{vocab.ExecRunning, vocab.ExecWaiting, vocab.ExecCompleted, vocab.ExecFailed, vocab.ExecCancelled}

// ExecutionSummary is an execution without its input, nodes and waits: an item of the
// execution list, and the head of an execution's view.
type ExecutionSummary struct {
	ID              uuid.UUID             `json:"id"`
	Workflow        string                `json:"workflow"`
	WorkflowVersion int32                 `json:"workflow_version"`
	Status          vocab.ExecutionStatus `json:"status"`
	Error           *string               `json:"error,omitempty"`
	CreatedAt       time.Time             `json:"created_at"`
	UpdatedAt       time.Time             `json:"updated_at"`
	FinishedAt      *time.Time            `json:"finished_at,omitempty"`
	// Summary is the execution's business key, drawn from its input by the workflow's
	// display template or, without one, its first scalar fields (workflow.Summary).
	Summary string `json:"summary,omitempty"`
}

// ExecutionFilter selects executions; zero fields do not filter.
type ExecutionFilter struct {
	Status   string
	Workflow string
	// CorrelationID, when set, keeps the execution whose wait has that correlation id.
	CorrelationID *uuid.UUID
	// CreatedFrom and CreatedTo, when set, keep executions created at or after From and
	// before To.
	CreatedFrom, CreatedTo *time.Time
}

// Executions returns executions newest first, by (created_at, id) descending.
func (r *Reader) Executions(ctx context.Context, f ExecutionFilter, pg Paging) (Page[ExecutionSummary], error) {
	limit, err := limitOf(pg.Limit)
	if err != nil {
		return Page[ExecutionSummary]{}, err
	}
	p := dbsqlc.ExecutionListParams{Max: int32(limit + 1), CorrelationID: f.CorrelationID, CreatedFrom: f.CreatedFrom, CreatedTo: f.CreatedTo}
	if f.CreatedFrom != nil && f.CreatedTo != nil && !f.CreatedFrom.Before(*f.CreatedTo) {
		return Page[ExecutionSummary]{}, &QueryError{Param: "created_to", Reason: "must be after created_from"}
	}
	if p.Status, err = oneOf("status", f.Status, ExecutionStatuses); err != nil {
		return Page[ExecutionSummary]{}, err
	}
	if p.Workflow, err = Text("workflow", f.Workflow); err != nil {
		return Page[ExecutionSummary]{}, err
	}
	if pg.Cursor != "" {
		at, id, err := decodeTimeID(kindExecutions, pg.Cursor)
		if err != nil {
			return Page[ExecutionSummary]{}, err
		}
		p.BeforeCreatedAt, p.BeforeID = &at, &id
	}
	rows, err := read(ctx, r, "executions", func(tx pgx.Tx) ([]dbsqlc.ExecutionListRow, error) {
		rows, err := r.q.ExecutionList(ctx, tx, p)
		if err != nil {
			return nil, err
		}
		return rows, r.displays.load(ctx, r.q, tx, versionsOf(rows, func(e dbsqlc.ExecutionListRow) (string, int32) { return e.WorkflowName, e.WorkflowVersion }))
	})
	if err != nil {
		return Page[ExecutionSummary]{}, err
	}
	return pageOf(rows, limit, func(e dbsqlc.ExecutionListRow) (ExecutionSummary, error) {
		return ExecutionSummary{
			ID: e.ID, Workflow: e.WorkflowName, WorkflowVersion: e.WorkflowVersion, Status: e.Status,
			Error: e.Error, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, FinishedAt: e.FinishedAt,
			Summary: r.displays.summary(e.WorkflowName, e.WorkflowVersion, e.Input),
		}, nil
	}, func(e dbsqlc.ExecutionListRow) string { return encodeTimeID(kindExecutions, e.CreatedAt, e.ID) })
}
