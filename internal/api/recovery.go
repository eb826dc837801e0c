package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/internal/problem"
)

// Action names an operator's recovery action: what an access check asks permission
// for and what an audit trail records.
type Action string

// Recovery actions.
const (
	ActionRedrive Action = "execution.redrive"
	ActionRestart Action = "execution.restart"
)

// recoveryRoutes are the operator's recovery actions. Each passes through action, the
// one place where what every such action needs happens (see there).
func (h *handlers) recoveryRoutes(e *echo.Echo) {
	e.POST("/api/v1/executions/:id/redrive", h.action(ActionRedrive, h.redriveExecution))
	e.POST("/api/v1/executions/:id/restart", h.action(ActionRestart, h.restartExecution))
}

// action wraps a recovery action's handler. It is the single place where an action is
// checked and recorded: a role check goes before next, an audit row after it (the
// outcome is c.Response().Status once next returned, or the problem next returned). For
// now it logs each action with its target and outcome.
func (h *handlers) action(name Action, next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		status := c.Response().Status
		var p *problem.Problem
		if errors.As(err, &p) {
			status = p.Status
		} else if err != nil {
			status = http.StatusInternalServerError
		}
		h.logger.InfoContext(c.Request().Context(), "operator action", "action", string(name),
			"path", c.Request().URL.Path, "remote_addr", c.RealIP(), "status", status)
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
