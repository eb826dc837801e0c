package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/internal/problem"
)

// Action names an operator's recovery action: what an access check asks permission
// for and what the audit log records. The names are the audit log's.
type Action = audit.Action

// Recovery actions.
const (
	ActionRedrive            = audit.ActionExecutionRedrive
	ActionRestart            = audit.ActionExecutionRestart
	ActionRedriveMany        = audit.ActionExecutionRedriveMany
	ActionReplayDeadLetter   = audit.ActionDeadLetterReplay
	ActionDismissDeadLetter  = audit.ActionDeadLetterDismiss
	ActionReplayUnmatched    = audit.ActionUnmatchedReplay
	ActionDismissUnmatched   = audit.ActionUnmatchedDismiss
	ActionDismissDeadLetters = audit.ActionDeadLetterDismissMany
)

// recoveryRoutes are the operator's recovery actions. Each passes through action, the
// one place where what every such action needs happens (see there).
func (h *handlers) recoveryRoutes(e *echo.Echo) {
	e.POST("/api/v1/executions/:id/redrive", h.action(ActionRedrive, h.redriveExecution))
	e.POST("/api/v1/executions/redrive", h.action(ActionRedriveMany, h.redriveMany))
	e.POST("/api/v1/executions/:id/restart", h.action(ActionRestart, h.restartExecution))
	e.POST("/api/v1/events/dead-letters/dismiss", h.action(ActionDismissDeadLetters, h.dismissDeadLetters))
	e.POST("/api/v1/events/dead-letters/:id/replay", h.action(ActionReplayDeadLetter, h.replay(deadLetters)))
	e.POST("/api/v1/events/dead-letters/:id/dismiss", h.action(ActionDismissDeadLetter, h.dismiss(deadLetters)))
	e.POST("/api/v1/events/unmatched/:id/replay", h.action(ActionReplayUnmatched, h.replay(unmatchedEvents)))
	e.POST("/api/v1/events/unmatched/:id/dismiss", h.action(ActionDismissUnmatched, h.dismiss(unmatchedEvents)))
}

// action wraps a recovery action's handler with the line that logs it, its target and
// its outcome. Who may call it is decided before it runs (the service's route table); its
// audit row is written in the transaction of the change by the code that makes it.
func (h *handlers) action(name Action, next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		status := StatusOf(c, err)
		h.logger.InfoContext(c.Request().Context(), "operator action", "action", string(name),
			"path", c.Request().URL.Path, "remote_addr", c.Request().RemoteAddr, "status", status)
		return err
	}
}

// executionParam parses the :id of an execution route.
func executionParam(c echo.Context) (uuid.UUID, error) {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return id, problem.New(http.StatusBadRequest, "execution id is not a UUID").WithType("malformed-id")
	}
	return id, nil
}

// redriveExecution continues a failed execution from its failed nodes.
func (h *handlers) redriveExecution(c echo.Context) error {
	id, err := executionParam(c)
	if err != nil {
		return err
	}
	r, err := h.ex.Redrive(c.Request().Context(), id)
	var notFailed *executor.ExecutionNotFailedError
	switch {
	case errors.Is(err, executor.ErrExecutionNotFound):
		return problem.New(http.StatusNotFound, "no execution "+id.String()).WithType("execution-not-found")
	case errors.As(err, &notFailed):
		return problem.New(http.StatusConflict, err.Error()).WithType("execution-not-failed").With("execution_status", notFailed.Status)
	case err != nil:
		return err
	}
	return c.JSON(http.StatusOK, r)
}

type restartRequest struct {
	// Version is "same" (default) or "latest".
	Version executor.RestartVersion `json:"version"`
	// Input replaces the old execution's input when present.
	Input  json.RawMessage `json:"input"`
	Reason string          `json:"reason"`
}

// restartExecution starts a new execution in place of an old one, cancelling the old
// one first if it is still open.
func (h *handlers) restartExecution(c echo.Context) error {
	id, err := executionParam(c)
	if err != nil {
		return err
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	var req restartRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return problem.New(http.StatusBadRequest, `body must be {"version": "same|latest", "input": <JSON>, "reason": "..."}: `+err.Error()).WithType("malformed-json")
		}
	}
	if req.Version != "" && req.Version != executor.RestartSameVersion && req.Version != executor.RestartLatestVersion {
		return problem.New(http.StatusBadRequest, `"version" must be "same" or "latest"`).WithType("invalid-request")
	}
	if string(req.Input) == "null" {
		req.Input = nil
	}
	r, err := h.ex.Restart(c.Request().Context(), id, executor.RestartOptions{Version: req.Version, Input: req.Input, Reason: req.Reason})
	var again *executor.AlreadyRestartedError
	switch {
	case errors.Is(err, executor.ErrExecutionNotFound):
		return problem.New(http.StatusNotFound, "no execution "+id.String()).WithType("execution-not-found")
	case errors.As(err, &again):
		return problem.New(http.StatusConflict, err.Error()).WithType("execution-already-restarted").With("restarted_as", again.As.String())
	case err != nil:
		return err
	}
	return c.JSON(http.StatusCreated, r)
}

// eventRows names the rows an event replay or dismissal acts on.
type eventRows struct {
	what     string // in messages
	notFound string // problem type
}

var (
	deadLetters     = eventRows{what: "dead letter", notFound: "dead-letter-not-found"}
	unmatchedEvents = eventRows{what: "unmatched event", notFound: "unmatched-event-not-found"}
)

// readEventAction parses the :id of a dead letter or unmatched event and the optional
// JSON body into req (unknown fields refused).
func readEventAction(c echo.Context, rows eventRows, req any, shape string) (int64, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, problem.New(http.StatusBadRequest, rows.what+" id is not a positive integer").WithType("malformed-id")
	}
	body, err := readBodyUpTo(c, 64<<10)
	if err != nil {
		return 0, err
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(req); err != nil {
			return 0, problem.New(http.StatusBadRequest, "body must be "+shape+": "+err.Error()).WithType("malformed-json")
		}
	}
	return id, nil
}

// eventProblem maps the aggregator's replay and dismissal errors to problems.
func eventProblem(rows eventRows, id int64, err error) error {
	var resolved *aggregator.ResolvedError
	var notReplayable *aggregator.NotReplayableError
	var notApplied *aggregator.NotAppliedError
	switch {
	case errors.Is(err, aggregator.ErrEventNotFound):
		return problem.New(http.StatusNotFound, "no "+rows.what+" "+strconv.FormatInt(id, 10)).WithType(rows.notFound)
	case errors.As(err, &resolved):
		return problem.New(http.StatusConflict, err.Error()).WithType("event-resolved").With("resolution", resolved.Resolution)
	case errors.As(err, &notReplayable):
		return problem.New(http.StatusUnprocessableEntity, err.Error()).WithType("event-not-replayable")
	case errors.As(err, &notApplied):
		return problem.New(http.StatusConflict, err.Error()).WithType("replay-not-applied").
			With("outcome", notApplied.Outcome).With("execution_id", notApplied.ExecutionID.String())
	}
	return err
}

type replayRequest struct {
	// ExecutionID replays the event into this execution instead of its own.
	ExecutionID *uuid.UUID `json:"execution_id"`
}

// replay replays a dead letter or an unmatched event through the path of a live event.
func (h *handlers) replay(rows eventRows) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req replayRequest
		id, err := readEventAction(c, rows, &req, `{"execution_id": "<uuid>"}`)
		if err != nil {
			return err
		}
		var r aggregator.Replayed
		if rows == deadLetters {
			r, err = h.agg.ReplayDeadLetter(c.Request().Context(), id, req.ExecutionID)
		} else {
			r, err = h.agg.ReplayUnmatched(c.Request().Context(), id, req.ExecutionID)
		}
		if err != nil {
			return eventProblem(rows, id, err)
		}
		return c.JSON(http.StatusOK, r)
	}
}

type dismissRequest struct {
	Reason string `json:"reason"`
}

// dismissed is the answer to a dismissal.
type dismissed struct {
	ID         int64                 `json:"id"`
	Resolution aggregator.Resolution `json:"resolution"`
	Reason     string                `json:"reason"`
}

// dismiss marks a dead letter or an unmatched event dismissed, with a reason.
func (h *handlers) dismiss(rows eventRows) echo.HandlerFunc {
	return func(c echo.Context) error {
		var req dismissRequest
		id, err := readEventAction(c, rows, &req, `{"reason": "..."}`)
		if err != nil {
			return err
		}
		if strings.TrimSpace(req.Reason) == "" {
			return problem.New(http.StatusBadRequest, `"reason" is required: say why the event is dismissed`).WithType("invalid-request")
		}
		if rows == deadLetters {
			err = h.agg.DismissDeadLetter(c.Request().Context(), id, req.Reason)
		} else {
			err = h.agg.DismissUnmatched(c.Request().Context(), id, req.Reason)
		}
		if err != nil {
			return eventProblem(rows, id, err)
		}
		return c.JSON(http.StatusOK, dismissed{ID: id, Resolution: aggregator.ResolutionDismissed, Reason: req.Reason})
	}
}

type redriveManyRequest struct {
	Workflow      string     `json:"workflow"`
	Node          string     `json:"node"`
	ErrorContains string     `json:"error_contains"`
	FailedAfter   *time.Time `json:"failed_after"`
	FailedBefore  *time.Time `json:"failed_before"`
	DryRun        bool       `json:"dry_run"`
	Limit         int        `json:"limit"`
	Batch         int        `json:"batch"`
}

// redriveMany redrives the failed executions a filter selects, in bounded batches.
func (h *handlers) redriveMany(c echo.Context) error {
	body, err := readBodyUpTo(c, 64<<10)
	if err != nil {
		return err
	}
	var req redriveManyRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return problem.New(http.StatusBadRequest, "body must be a bulk redrive request: "+err.Error()).WithType("malformed-json")
		}
	}
	f := executor.RedriveFilter{Workflow: req.Workflow, Node: req.Node, ErrorContains: req.ErrorContains}
	if req.FailedAfter != nil {
		f.FailedAfter = *req.FailedAfter
	}
	if req.FailedBefore != nil {
		f.FailedBefore = *req.FailedBefore
	}
	r, err := h.ex.RedriveMany(c.Request().Context(), f, executor.BulkOptions{DryRun: req.DryRun, Limit: req.Limit, Batch: req.Batch})
	var qerr *executor.OptionError
	if errors.As(err, &qerr) {
		return problem.New(http.StatusBadRequest, qerr.Error()).WithType("invalid-request")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

type dismissManyRequest struct {
	aggregator.DeadLetterFilter
	Reason string `json:"reason"`
	DryRun bool   `json:"dry_run"`
	Limit  int    `json:"limit"`
	Batch  int    `json:"batch"`
}

// dismissDeadLetters dismisses the dead letters a filter selects, in bounded batches.
func (h *handlers) dismissDeadLetters(c echo.Context) error {
	body, err := readBodyUpTo(c, 64<<10)
	if err != nil {
		return err
	}
	req := dismissManyRequest{Limit: executor.BulkLimitDefault, Batch: executor.BulkBatchDefault}
	if len(strings.TrimSpace(string(body))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return problem.New(http.StatusBadRequest, "body must be a bulk dismissal request: "+err.Error()).WithType("malformed-json")
		}
	}
	switch {
	case req.Limit < 1 || req.Limit > executor.BulkLimitMax:
		return problem.New(http.StatusBadRequest, fmt.Sprintf(`"limit" must be 1..%d`, executor.BulkLimitMax)).WithType("invalid-request")
	case req.Batch < 1 || req.Batch > executor.BulkBatchMax:
		return problem.New(http.StatusBadRequest, fmt.Sprintf(`"batch" must be 1..%d`, executor.BulkBatchMax)).WithType("invalid-request")
	case !req.DryRun && strings.TrimSpace(req.Reason) == "":
		return problem.New(http.StatusBadRequest, `"reason" is required: say why the events are dismissed`).WithType("invalid-request")
	}
	r, err := h.agg.DismissDeadLetters(c.Request().Context(), req.DeadLetterFilter, req.Reason, req.DryRun, req.Limit, req.Batch)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}
