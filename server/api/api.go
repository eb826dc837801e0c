// Package api serves the management HTTP API under /api/v1: storing and validating
// workflow definitions, starting and cancelling executions, sending events to an
// execution by type, and the operator's reads of workflows, executions, wait states and
// events that matched nothing. It translates between HTTP and the executor or the
// aggregator; every error is an RFC 7807 problem. It also serves the OpenAPI document of the whole
// HTTP surface (/openapi.json). Callbacks from external services are not here but in
// package callbacks.
package api

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/server/auth"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// maxDefinitionBytes bounds a definition or an execution input.
const maxDefinitionBytes = 4 << 20

// Access is what the routes of access control need: the authenticator, whose store
// keeps the tokens, and the pool the lists (the audit log among them) are read from.
type Access struct {
	Auth *auth.Authenticator
	Pool *pgxpool.Pool
}

// Register adds the API routes, and the OpenAPI document describing them, to e. Who may
// call which route is decided before the handlers run (auth.Authenticator.Middleware);
// the handlers only narrow it where the request decides (a sender's workflow prefix).
// logger receives a line per recovery action.
func Register(e *echo.Echo, ex *executor.Executor, agg *aggregator.Aggregator, acc Access, logger *slog.Logger) {
	h := &handlers{ex: ex, agg: agg, lists: readmodel.New(acc.Pool), access: acc, logger: logger}
	e.GET("/api/v1/workflows", h.listWorkflows)
	// Echo tries the static segment first and falls back to :name for other methods, so
	// a workflow named "validate" is still read and stored (TestValidateIsNotAName).
	e.POST("/api/v1/workflows/validate", h.validateWorkflow)
	e.GET("/api/v1/workflows/:name", h.getWorkflow)
	e.PUT("/api/v1/workflows/:name", h.putWorkflow)
	e.POST("/api/v1/workflows/:name/executions", h.startExecution)
	e.GET("/api/v1/executions", h.listExecutions)
	e.GET("/api/v1/executions/:id", h.getExecution)
	e.POST("/api/v1/executions/:id/cancel", h.cancelExecution)
	e.POST("/api/v1/executions/:id/waits/:node/cancel", h.cancelWait)
	e.POST("/api/v1/executions/:id/events", h.sendEvent)
	e.GET("/api/v1/events/unmatched", h.listUnmatched)
	e.GET("/api/v1/events/dead-letters", h.listDeadLetters)
	e.GET("/api/v1/wait-states", h.listWaitStates)
	e.GET("/api/v1/wait-states/:id", h.getWaitState)
	e.GET("/api/v1/whoami", h.whoami)
	e.GET("/api/v1/tokens", h.listTokens)
	e.POST("/api/v1/tokens", h.createToken)
	e.POST("/api/v1/tokens/:name/revoke", h.revokeToken)
	e.GET("/api/v1/audit", h.listAudit)
	h.recoveryRoutes(e)
	e.GET(OpenAPIPath, serveOpenAPI)
}

type handlers struct {
	ex     *executor.Executor
	agg    *aggregator.Aggregator
	lists  *readmodel.Reader
	access Access
	logger *slog.Logger
}

func readBody(c echo.Context) ([]byte, error) {
	return readBodyUpTo(c, maxDefinitionBytes)
}

// readBodyUpTo reads a body of at most limit bytes; a larger one is a 413 problem.
func readBodyUpTo(c echo.Context, limit int) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, int64(limit)+1))
	if err != nil {
		return nil, problem.New(http.StatusBadRequest, "could not read body: "+err.Error())
	}
	if len(body) > limit {
		return nil, problem.New(http.StatusRequestEntityTooLarge, "body too large").WithType("body-too-large")
	}
	return body, nil
}

func (h *handlers) putWorkflow(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	stored, err := h.ex.PutWorkflow(c.Request().Context(), c.Param("name"), body)
	if verr, ok := errors.AsType[*workflow.ValidationError](err); ok {
		return invalidDefinition(verr)
	}
	if err != nil {
		return err
	}
	status := http.StatusOK
	if stored.Created {
		status = http.StatusCreated
	}
	return c.JSON(status, stored)
}

type startRequest struct {
	Input json.RawMessage `json:"input"`
}

func (h *handlers) startExecution(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	var req startRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return problem.New(http.StatusBadRequest, "body must be {\"input\": <JSON>}: "+err.Error()).WithType("malformed-json")
		}
	}
	started, err := h.ex.StartExecution(c.Request().Context(), c.Param("name"), req.Input)
	if errors.Is(err, executor.ErrWorkflowNotFound) {
		return problem.New(http.StatusNotFound, "no workflow named "+c.Param("name")).WithType("workflow-not-found")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, started)
}

func (h *handlers) getExecution(c echo.Context) error {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return problem.New(http.StatusBadRequest, "execution id is not a UUID").WithType("malformed-id")
	}
	v, err := h.lists.Execution(c.Request().Context(), id)
	if errors.Is(err, readmodel.ErrNotFound) {
		return problem.New(http.StatusNotFound, "no execution "+id.String()).WithType("execution-not-found")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

type cancelRequest struct {
	Reason string `json:"reason"`
	// Then, for a single wait: "fail" (default) or "continue".
	Then executor.Then `json:"then"`
}

// readCancel parses an optional JSON body of a cancel request.
func readCancel(c echo.Context) (uuid.UUID, cancelRequest, error) {
	var req cancelRequest
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return id, req, problem.New(http.StatusBadRequest, "execution id is not a UUID").WithType("malformed-id")
	}
	body, err := readBody(c)
	if err != nil {
		return id, req, err
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return id, req, problem.New(http.StatusBadRequest, `body must be {"reason": "...", "then": "fail|continue"}: `+err.Error()).WithType("malformed-json")
		}
	}
	return id, req, nil
}

// cancelProblem maps the executor's cancel errors to problems.
func cancelProblem(id uuid.UUID, err error) error {
	var fin *executor.ExecutionFinishedError
	var wfin *aggregator.WaitFinishedError
	switch {
	case errors.Is(err, executor.ErrExecutionNotFound):
		return problem.New(http.StatusNotFound, "no execution "+id.String()).WithType("execution-not-found")
	case errors.Is(err, executor.ErrWaitNotFound):
		return problem.New(http.StatusNotFound, "execution "+id.String()+" has no wait for this node").WithType("wait-not-found")
	case errors.As(err, &fin):
		return problem.New(http.StatusConflict, err.Error()).WithType("execution-finished").With("execution_status", fin.Status)
	case errors.As(err, &wfin):
		return problem.New(http.StatusConflict, err.Error()).WithType("wait-finished").With("wait_status", wfin.Status)
	}
	return err
}

// cancelExecution cancels an execution; cancelling a cancelled one is a no-op (200).
func (h *handlers) cancelExecution(c echo.Context) error {
	id, req, err := readCancel(c)
	if err != nil {
		return err
	}
	if req.Then != "" {
		return problem.New(http.StatusBadRequest, `"then" applies to cancelling one wait, not an execution`).WithType("invalid-request")
	}
	if _, err := h.ex.CancelExecution(c.Request().Context(), id, req.Reason); err != nil {
		return cancelProblem(id, err)
	}
	v, err := h.lists.Execution(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// cancelWait cancels one open wait; then says whether the execution fails or goes on.
func (h *handlers) cancelWait(c echo.Context) error {
	id, req, err := readCancel(c)
	if err != nil {
		return err
	}
	if req.Then != "" && req.Then != executor.ThenFail && req.Then != executor.ThenContinue {
		return problem.New(http.StatusBadRequest, `"then" must be "fail" or "continue"`).WithType("invalid-request")
	}
	if err := h.ex.CancelWait(c.Request().Context(), id, c.Param("node"), req.Then, req.Reason); err != nil {
		return cancelProblem(id, err)
	}
	v, err := h.lists.Execution(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}
