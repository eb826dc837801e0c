package executor

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/execstate"
	"github.com/rendezvous-run/rendezvous/internal/workflow"
)

// Page sizes of the operator lists.
const (
	PageLimitDefault = 50
	PageLimitMax     = 500
)

// WaitStatuses are the statuses a wait state can have, the values of the wait-state
// list's status filter.
var WaitStatuses = []execstate.WaitStatus{
	execstate.WaitWaiting, execstate.WaitScheduled, execstate.WaitCompleted, execstate.WaitTimeout,
	execstate.WaitFailed, execstate.WaitCancelled, execstate.WaitResumed, execstate.WaitError,
}

// ExecutionStatuses are the statuses an execution can have, the values of the execution
// list's status filter.
var ExecutionStatuses = []execstate.ExecutionStatus{
	execstate.ExecRunning, execstate.ExecWaiting, execstate.ExecCompleted, execstate.ExecFailed, execstate.ExecCancelled,
}

// Page is one page of a list. NextCursor, empty on the last page, continues the list
// after the page's last item.
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// QueryError is a list or lookup argument the executor refuses; Param names it as the
// API does (status, limit, cursor, …).
type QueryError struct {
	Param  string
	Reason string
}

func (e *QueryError) Error() string { return e.Param + ": " + e.Reason }

// WaitStateFilter selects and pages wait states; zero fields do not filter.
type WaitStateFilter struct {
	Status   string
	Workflow string
	NodeID   string
	// ExecutionID, when set, lists that execution's waits only.
	ExecutionID *uuid.UUID
	// Limit is the page size, 1..PageLimitMax; 0 means PageLimitDefault.
	Limit int
	// Cursor is a previous page's NextCursor; empty starts at the beginning.
	Cursor string
}

// ListWaitStates returns wait states oldest first — the longest waiting at the top — by
// (created_at, id). A wait created while a client pages may be missed if it sorts before
// the cursor, but no wait is ever listed twice or skipped when it existed throughout.
func (e *Executor) ListWaitStates(ctx context.Context, f WaitStateFilter) (Page[WaitStateView], error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return Page[WaitStateView]{}, err
	}
	p := dbsqlc.WaitStateListParams{Max: ptr(int32(limit + 1))}
	if p.Status, err = oneOf("status", f.Status, WaitStatuses); err != nil {
		return Page[WaitStateView]{}, err
	}
	if p.Workflow, err = text("workflow", f.Workflow); err != nil {
		return Page[WaitStateView]{}, err
	}
	if p.NodeID, err = text("node", f.NodeID); err != nil {
		return Page[WaitStateView]{}, err
	}
	p.ExecutionID = f.ExecutionID
	if f.Cursor != "" {
		at, id, err := decodeTimeCursor(cursorWaitStates, f.Cursor)
		if err != nil {
			return Page[WaitStateView]{}, err
		}
		p.AfterCreatedAt, p.AfterID = &at, &id
	}
	var rows []dbsqlc.WaitStateListRow
	err = e.readTx(ctx, func(tx pgx.Tx) error {
		rows, err = e.q.WaitStateList(ctx, tx, p)
		return err
	})
	if err != nil {
		return Page[WaitStateView]{}, fmt.Errorf("list wait states: %w", err)
	}
	return pageOf(rows, limit, newWaitStateView, func(r dbsqlc.WaitStateListRow) string {
		return encodeTimeCursor(cursorWaitStates, r.CreatedAt, r.ID)
	})
}

// WaitState returns one wait state, or ErrWaitNotFound.
func (e *Executor) WaitState(ctx context.Context, id uuid.UUID) (WaitStateView, error) {
	var rows []dbsqlc.WaitStateListRow
	err := e.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		rows, err = e.q.WaitStateList(ctx, tx, dbsqlc.WaitStateListParams{ID: &id, Max: ptr(int32(1))})
		return err
	})
	if err != nil {
		return WaitStateView{}, fmt.Errorf("load wait state: %w", err)
	}
	if len(rows) == 0 {
		return WaitStateView{}, ErrWaitNotFound
	}
	return newWaitStateView(rows[0])
}

// ExecutionFilter selects and pages executions; zero fields do not filter.
type ExecutionFilter struct {
	Status   string
	Workflow string
	// CorrelationID, when set, keeps the execution whose wait has that correlation id.
	CorrelationID *uuid.UUID
	// CreatedFrom and CreatedTo, when set, keep executions created at or after From and
	// before To.
	CreatedFrom, CreatedTo *time.Time
	// Limit and Cursor page as in WaitStateFilter.
	Limit  int
	Cursor string
}

// ListExecutions returns executions newest first, by (created_at, id) descending.
func (e *Executor) ListExecutions(ctx context.Context, f ExecutionFilter) (Page[ExecutionSummary], error) {
	limit, err := pageLimit(f.Limit)
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
	if p.Workflow, err = text("workflow", f.Workflow); err != nil {
		return Page[ExecutionSummary]{}, err
	}
	if f.Cursor != "" {
		at, id, err := decodeTimeCursor(cursorExecutions, f.Cursor)
		if err != nil {
			return Page[ExecutionSummary]{}, err
		}
		p.BeforeCreatedAt, p.BeforeID = &at, &id
	}
	var rows []dbsqlc.ExecutionListRow
	err = e.readTx(ctx, func(tx pgx.Tx) error {
		rows, err = e.q.ExecutionList(ctx, tx, p)
		return err
	})
	if err != nil {
		return Page[ExecutionSummary]{}, fmt.Errorf("list executions: %w", err)
	}
	return pageOf(rows, limit, func(r dbsqlc.ExecutionListRow) (ExecutionSummary, error) {
		return ExecutionSummary{
			ID: r.ID, Workflow: r.WorkflowName, WorkflowVersion: r.WorkflowVersion, Status: r.Status,
			Error: r.Error, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, FinishedAt: r.FinishedAt,
		}, nil
	}, func(r dbsqlc.ExecutionListRow) string { return encodeTimeCursor(cursorExecutions, r.CreatedAt, r.ID) })
}

// WorkflowSummary is one stored workflow name in the workflow list.
type WorkflowSummary struct {
	Name          string `json:"name"`
	LatestVersion int32  `json:"latest_version"`
	// Versions counts the stored versions.
	Versions int32 `json:"versions"`
	// CreatedAt is when the first version was stored, UpdatedAt the latest.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ListWorkflows returns the stored workflows by name.
func (e *Executor) ListWorkflows(ctx context.Context, limit int, cursor string) (Page[WorkflowSummary], error) {
	limit, err := pageLimit(limit)
	if err != nil {
		return Page[WorkflowSummary]{}, err
	}
	p := dbsqlc.WorkflowListParams{Max: int32(limit + 1)}
	if cursor != "" {
		name, err := decodeNameCursor(cursor)
		if err != nil {
			return Page[WorkflowSummary]{}, err
		}
		p.AfterName = &name
	}
	var rows []dbsqlc.WorkflowListRow
	err = e.readTx(ctx, func(tx pgx.Tx) error {
		rows, err = e.q.WorkflowList(ctx, tx, p)
		return err
	})
	if err != nil {
		return Page[WorkflowSummary]{}, fmt.Errorf("list workflows: %w", err)
	}
	return pageOf(rows, limit, func(r dbsqlc.WorkflowListRow) (WorkflowSummary, error) {
		return WorkflowSummary{Name: r.Name, LatestVersion: r.LatestVersion, Versions: r.Versions,
			CreatedAt: r.FirstCreatedAt, UpdatedAt: r.LatestCreatedAt}, nil
	}, func(r dbsqlc.WorkflowListRow) string { return encodeNameCursor(r.Name) })
}

// WorkflowVersion is one stored version of a workflow.
type WorkflowVersion struct {
	Version   int32     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
}

// WorkflowView is one version of a workflow with the list of all of them.
type WorkflowView struct {
	Name          string `json:"name"`
	LatestVersion int32  `json:"latest_version"`
	// Version is the version whose Definition is shown.
	Version    int32           `json:"version"`
	Definition json.RawMessage `json:"definition"`
	// Versions lists every version, newest first.
	Versions []WorkflowVersion `json:"versions"`
}

// Workflow returns version (0: the latest) of the named workflow, or an error wrapping
// ErrWorkflowNotFound when the name or that version is unknown.
func (e *Executor) Workflow(ctx context.Context, name string, version int32) (*WorkflowView, error) {
	if _, err := text("name", name); err != nil {
		// No stored name holds such text.
		return nil, fmt.Errorf("%w: no workflow named %q", ErrWorkflowNotFound, name)
	}
	var v *WorkflowView
	err := e.readTx(ctx, func(tx pgx.Tx) error {
		versions, err := e.q.WorkflowVersions(ctx, tx, name)
		if err != nil {
			return fmt.Errorf("list workflow versions: %w", err)
		}
		if len(versions) == 0 {
			return fmt.Errorf("%w: no workflow named %s", ErrWorkflowNotFound, name)
		}
		v = &WorkflowView{Name: name, LatestVersion: versions[0].Version, Version: version, Versions: make([]WorkflowVersion, len(versions))}
		for i, r := range versions {
			v.Versions[i] = WorkflowVersion{Version: r.Version, CreatedAt: r.CreatedAt}
		}
		if version == 0 {
			v.Version = v.LatestVersion
		}
		row, err := e.q.WorkflowGet(ctx, tx, dbsqlc.WorkflowGetParams{Name: name, Version: v.Version})
		if err != nil {
			if errors.Is(db.Interpret(err), db.ErrNotFound) {
				return fmt.Errorf("%w: workflow %s has no version %d (latest is %d)", ErrWorkflowNotFound, name, version, v.LatestVersion)
			}
			return fmt.Errorf("load workflow: %w", err)
		}
		v.Definition = row.Definition
		return nil
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Validated is the answer to a definition that passed validation.
type Validated struct {
	Valid bool `json:"valid"`
	// Nodes counts the definition's nodes.
	Nodes int `json:"nodes"`
}

// ValidateWorkflow checks raw exactly as PutWorkflow does, storing nothing. There is no
// stored name to compare with; the definition's own name is checked like any field.
// Problems are a *workflow.ValidationError.
func (e *Executor) ValidateWorkflow(raw []byte) (Validated, error) {
	wf, err := workflow.Compile(raw, e.reg)
	if err != nil {
		return Validated{}, err
	}
	if errs := e.checkLimits(wf); len(errs) > 0 {
		return Validated{}, &workflow.ValidationError{Errors: errs}
	}
	return Validated{Valid: true, Nodes: len(wf.Nodes())}, nil
}

// pageOf turns rows read with a limit of limit+1 into a page: a row beyond limit only
// tells that there is more, and the cursor then points after the last row shown.
func pageOf[R, T any](rows []R, limit int, item func(R) (T, error), cursor func(R) string) (Page[T], error) {
	page := Page[T]{Items: make([]T, 0, min(len(rows), limit))}
	for i, r := range rows {
		if i == limit {
			page.NextCursor = cursor(rows[limit-1])
			break
		}
		it, err := item(r)
		if err != nil {
			return Page[T]{}, err
		}
		page.Items = append(page.Items, it)
	}
	return page, nil
}

func pageLimit(n int) (int, error) {
	switch {
	case n == 0:
		return PageLimitDefault, nil
	case n < 1 || n > PageLimitMax:
		return 0, &QueryError{Param: "limit", Reason: fmt.Sprintf("must be an integer from 1 to %d", PageLimitMax)}
	}
	return n, nil
}

// oneOf returns nil for an empty value (no filter) and the value when it is one of
// allowed, the values of a named type (a filter's parameter is text in its statement).
func oneOf[T ~string](param, v string, allowed []T) (*string, error) {
	if v == "" {
		return nil, nil
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		if v == string(a) {
			return &v, nil
		}
		names[i] = string(a)
	}
	return nil, &QueryError{Param: param, Reason: fmt.Sprintf("%q is not one of %s", v, strings.Join(names, ", "))}
}

// text returns nil for an empty value (no filter) and the value when PostgreSQL can take
// it as text: a NUL or invalid UTF-8 would fail the statement, which is the caller's
// mistake and not a server error.
func text(param, v string) (*string, error) {
	if v == "" {
		return nil, nil
	}
	if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
		return nil, &QueryError{Param: param, Reason: "must be UTF-8 text without NUL characters"}
	}
	return &v, nil
}

func ptr[T any](v T) *T { return &v }

// Cursors are opaque to clients: a kind byte (so that one list's cursor is refused by
// another instead of silently positioning it), then the sort key of the last item
// returned, base64url-encoded. Decoding is strict: each position has one spelling.
const (
	cursorWaitStates = 'w' // + created_at (Unix µs, big-endian) + id
	cursorExecutions = 'e' // likewise
	cursorWorkflows  = 'n' // + name
)

var cursorEncoding = base64.RawURLEncoding.Strict()

func errCursor() error {
	return &QueryError{Param: "cursor", Reason: "not a cursor of this list; pass next_cursor of the previous page unchanged"}
}

func encodeTimeCursor(kind byte, at time.Time, id uuid.UUID) string {
	b := make([]byte, 0, 1+8+16)
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, uint64(at.UnixMicro()))
	b = append(b, id[:]...)
	return cursorEncoding.EncodeToString(b)
}

// A cursor's time lies within years PostgreSQL and Go both represent; anything else was
// not made by this package.
const cursorMinYear, cursorMaxYear = 1, 9999

func decodeTimeCursor(kind byte, s string) (time.Time, uuid.UUID, error) {
	b, err := cursorEncoding.DecodeString(s)
	if err != nil || len(b) != 1+8+16 || b[0] != kind {
		return time.Time{}, uuid.Nil, errCursor()
	}
	at := time.UnixMicro(int64(binary.BigEndian.Uint64(b[1:9]))).UTC()
	if at.Year() < cursorMinYear || at.Year() > cursorMaxYear {
		return time.Time{}, uuid.Nil, errCursor()
	}
	id, err := uuid.FromBytes(b[9:])
	if err != nil {
		return time.Time{}, uuid.Nil, errCursor()
	}
	return at, id, nil
}

func encodeNameCursor(name string) string {
	return cursorEncoding.EncodeToString(append([]byte{cursorWorkflows}, name...))
}

func decodeNameCursor(s string) (string, error) {
	b, err := cursorEncoding.DecodeString(s)
	if err != nil || len(b) < 2 || b[0] != cursorWorkflows || !utf8.Valid(b[1:]) || bytes.IndexByte(b, 0) >= 0 {
		return "", errCursor()
	}
	return string(b[1:]), nil
}
