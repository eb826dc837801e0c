package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/google/uuid"
)

// MaxPageSize is the largest page the server hands out.
const MaxPageSize = 500

// Page is one page of a listing. NextCursor is empty on the last page.
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// PageRequest asks for one page: Limit items (0: the server's default) after Cursor
// (empty: from the start).
type PageRequest struct {
	Limit  int
	Cursor string
}

func (p PageRequest) query(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	return q
}

// Collect reads pages from the first on through list until it has max items (every
// item when max <= 0), and reports whether the listing had more. Each page asks for no
// more than it still needs plus one, so the answer to "more?" is exact without a
// request of its own.
func Collect[T any](ctx context.Context, max int, list func(context.Context, PageRequest) (*Page[T], error)) (items []T, more bool, err error) {
	var cursor string
	for {
		size := MaxPageSize
		if max > 0 {
			size = min(max-len(items)+1, MaxPageSize)
		}
		page, err := list(ctx, PageRequest{Limit: size, Cursor: cursor})
		if err != nil {
			return items, false, err
		}
		items = append(items, page.Items...)
		if max > 0 && len(items) > max {
			return items[:max], true, nil
		}
		if page.NextCursor == "" {
			return items, false, nil
		}
		if max > 0 && len(items) == max {
			// Full, with a cursor: whether anything follows needs one more item.
			next, err := list(ctx, PageRequest{Limit: 1, Cursor: page.NextCursor})
			if err != nil {
				return items, false, err
			}
			return items, len(next.Items) > 0, nil
		}
		cursor = page.NextCursor
	}
}

// list reads one page of a listing. A next_cursor equal to the cursor asked with is
// not an answer of the API: following it would loop forever.
func list[T any](ctx context.Context, c *Client, path string, q url.Values, p PageRequest) (*Page[T], error) {
	var out Page[T]
	if _, err := c.do(ctx, http.MethodGet, path, p.query(q), nil, &out); err != nil {
		return nil, err
	}
	if p.Cursor != "" && out.NextCursor == p.Cursor {
		return nil, &ResponseError{Method: http.MethodGet, URL: c.base + path, Status: http.StatusOK,
			Err: errors.New("next_cursor repeats the cursor of the request")}
	}
	return &out, nil
}

// PutWorkflow stores def (a definition, JSON) under name: a new version unless it equals
// the latest. The server rejects an invalid definition with 422 invalid-definition and
// every problem in Error.Errors.
func (c *Client) PutWorkflow(ctx context.Context, name string, def []byte) (*StoredWorkflow, error) {
	var out StoredWorkflow
	status, err := c.do(ctx, http.MethodPut, "/api/v1/workflows/"+url.PathEscape(name), nil, def, &out)
	if err != nil {
		return nil, err
	}
	out.Created = status == http.StatusCreated
	return &out, nil
}

// ValidateWorkflow checks def as PutWorkflow would, storing nothing.
func (c *Client) ValidateWorkflow(ctx context.Context, def []byte) (*Validation, error) {
	var out Validation
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/workflows/validate", nil, def, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Workflows lists workflow names, ordered by name.
func (c *Client) Workflows(ctx context.Context, p PageRequest) (*Page[WorkflowSummary], error) {
	return list[WorkflowSummary](ctx, c, "/api/v1/workflows", nil, p)
}

// Workflow reads one version of a workflow; version 0 means the latest.
func (c *Client) Workflow(ctx context.Context, name string, version int) (*Workflow, error) {
	q := url.Values{}
	if version > 0 {
		q.Set("version", strconv.Itoa(version))
	}
	var out Workflow
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/workflows/"+url.PathEscape(name), q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// StartExecution starts the latest version of a workflow with input (a JSON value; nil
// means {}).
func (c *Client) StartExecution(ctx context.Context, workflow string, input json.RawMessage) (*StartedExecution, error) {
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	body, err := json.Marshal(struct {
		Input json.RawMessage `json:"input"`
	}{input})
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	var out StartedExecution
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/workflows/"+url.PathEscape(workflow)+"/executions", nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ExecutionFilter narrows a listing of executions; empty fields do not filter.
type ExecutionFilter struct {
	Status   string
	Workflow string
	// CorrelationID keeps the execution whose wait has this correlation id.
	CorrelationID string
}

// Executions lists executions, newest first.
func (c *Client) Executions(ctx context.Context, f ExecutionFilter, p PageRequest) (*Page[ExecutionSummary], error) {
	q := url.Values{}
	setIf(q, "status", f.Status)
	setIf(q, "workflow", f.Workflow)
	setIf(q, "correlation_id", f.CorrelationID)
	return list[ExecutionSummary](ctx, c, "/api/v1/executions", q, p)
}

// Execution reads an execution with its nodes and waits.
func (c *Client) Execution(ctx context.Context, id uuid.UUID) (*Execution, error) {
	var out Execution
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/executions/"+id.String(), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelExecution cancels an execution (again on a cancelled one changes nothing) and
// returns it as it is afterwards.
func (c *Client) CancelExecution(ctx context.Context, id uuid.UUID, reason string) (*Execution, error) {
	body, err := json.Marshal(struct {
		Reason string `json:"reason,omitempty"`
	}{reason})
	if err != nil {
		return nil, err
	}
	var out Execution
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/executions/"+id.String()+"/cancel", nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Redrive continues a failed execution from its failed nodes. An execution that is not
// failed is refused with 409 execution-not-failed.
func (c *Client) Redrive(ctx context.Context, id uuid.UUID) (*Redriven, error) {
	var out Redriven
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/executions/"+id.String()+"/redrive", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Restart starts a new execution in place of an old one (cancelled first when still
// open), linked both ways. A second restart is refused with 409
// execution-already-restarted.
func (c *Client) Restart(ctx context.Context, id uuid.UUID, opts RestartOptions) (*Restarted, error) {
	body, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	var out Restarted
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/executions/"+id.String()+"/restart", nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// What the execution does after one of its waits is cancelled.
const (
	ThenFail     = "fail"
	ThenContinue = "continue"
)

// CancelWait cancels the open wait of node in an execution; then is ThenFail (the
// default when empty) or ThenContinue. It returns the execution as it is afterwards.
func (c *Client) CancelWait(ctx context.Context, execution uuid.UUID, node, then, reason string) (*Execution, error) {
	body, err := json.Marshal(struct {
		Then   string `json:"then,omitempty"`
		Reason string `json:"reason,omitempty"`
	}{then, reason})
	if err != nil {
		return nil, err
	}
	var out Execution
	path := "/api/v1/executions/" + execution.String() + "/waits/" + url.PathEscape(node) + "/cancel"
	if _, err := c.do(ctx, http.MethodPost, path, nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WaitFilter narrows a listing of waits; zero fields do not filter.
type WaitFilter struct {
	Status    string
	Workflow  string
	Node      string
	Execution uuid.UUID
}

// WaitStates lists waits, longest-waiting first.
func (c *Client) WaitStates(ctx context.Context, f WaitFilter, p PageRequest) (*Page[WaitState], error) {
	q := url.Values{}
	setIf(q, "status", f.Status)
	setIf(q, "workflow", f.Workflow)
	setIf(q, "node", f.Node)
	if f.Execution != uuid.Nil {
		q.Set("execution", f.Execution.String())
	}
	return list[WaitState](ctx, c, "/api/v1/wait-states", q, p)
}

// WaitState reads one wait.
func (c *Client) WaitState(ctx context.Context, id uuid.UUID) (*WaitState, error) {
	var out WaitState
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/wait-states/"+id.String(), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func setIf(q url.Values, key, v string) {
	if v != "" {
		q.Set(key, v)
	}
}

// SendEvent sends an event of type typ to an execution: every node waiting for that
// type takes it, or it is buffered until one does. payload is any JSON value (nil sends
// none: null); id, when not empty, deduplicates (the same id again answers
// SendDuplicate). A finished execution refuses it with 409 execution-finished, an
// unknown one with 404 execution-not-found.
func (c *Client) SendEvent(ctx context.Context, execution uuid.UUID, typ string, payload json.RawMessage, id string) (*SentEvent, error) {
	body, err := json.Marshal(struct {
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload,omitempty"`
		ID      string          `json:"id,omitempty"`
	}{typ, payload, id})
	if err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	var out SentEvent
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/executions/"+execution.String()+"/events", nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UnmatchedEvents lists recent events that reached no wait, newest first; reason, when
// not empty, keeps those of one reason.
func (c *Client) UnmatchedEvents(ctx context.Context, reason string, p PageRequest) (*Page[UnmatchedEvent], error) {
	q := url.Values{}
	setIf(q, "reason", reason)
	return list[UnmatchedEvent](ctx, c, "/api/v1/events/unmatched", q, p)
}

// OpenWaitStatuses are the statuses of a wait that has not ended.
var OpenWaitStatuses = []string{StatusWaiting, StatusScheduled}

// CollectOpenWaits lists the open waits that f selects (its Status is replaced), up to
// max (0: all), longest-waiting first as the API orders every listing; more says that
// more follow. The API filters by one status at a time, so each open status is listed
// and the lists are merged.
func (c *Client) CollectOpenWaits(ctx context.Context, f WaitFilter, max int) (items []WaitState, more bool, err error) {
	for _, status := range OpenWaitStatuses {
		f.Status = status
		got, gotMore, err := Collect(ctx, max, func(ctx context.Context, p PageRequest) (*Page[WaitState], error) {
			return c.WaitStates(ctx, f, p)
		})
		if err != nil {
			return nil, false, err
		}
		items, more = append(items, got...), more || gotMore
	}
	slices.SortStableFunc(items, func(a, b WaitState) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return bytes.Compare(a.ID[:], b.ID[:])
	})
	if max > 0 && len(items) > max {
		return items[:max], true, nil
	}
	return items, more, nil
}

// Replay applies a dead letter or an unmatched event again, through the path of a live
// event, to its execution or to execution when not uuid.Nil. Each is resolved once: a
// second replay is refused with 409 event-resolved; an event that does nothing with 409
// replay-not-applied.
func (c *Client) Replay(ctx context.Context, rows EventRows, id int64, execution uuid.UUID) (*Replayed, error) {
	var req struct {
		ExecutionID *uuid.UUID `json:"execution_id,omitempty"`
	}
	if execution != uuid.Nil {
		req.ExecutionID = &execution
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var out Replayed
	path := "/api/v1/events/" + string(rows) + "/" + strconv.FormatInt(id, 10) + "/replay"
	if _, err := c.do(ctx, http.MethodPost, path, nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Dismiss marks a dead letter or an unmatched event dismissed, with why.
func (c *Client) Dismiss(ctx context.Context, rows EventRows, id int64, reason string) error {
	body, err := json.Marshal(struct {
		Reason string `json:"reason"`
	}{reason})
	if err != nil {
		return err
	}
	path := "/api/v1/events/" + string(rows) + "/" + strconv.FormatInt(id, 10) + "/dismiss"
	_, err = c.do(ctx, http.MethodPost, path, nil, body, nil)
	return err
}

// RedriveMany redrives, in bounded batches, up to f.Limit of the failed executions f
// selects (or only counts them, f.DryRun).
func (c *Client) RedriveMany(ctx context.Context, f RedriveFilter) (*RedrivenMany, error) {
	body, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	var out RedrivenMany
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/executions/redrive", nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DismissDeadLetters dismisses, in bounded batches, up to f.Limit of the unresolved dead
// letters f selects (or only counts them, f.DryRun).
func (c *Client) DismissDeadLetters(ctx context.Context, f DismissFilter) (*DismissedMany, error) {
	body, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	var out DismissedMany
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/events/dead-letters/dismiss", nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
