package api

// The operator's reads: wait states, workflows and executions, listed a page at a time
// or looked up one by one, and the validation of a definition without storing it. Query
// parameters are checked strictly: a misspelt filter answers 400 instead of silently
// listing everything.

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// invalidQuery is the problem of a query parameter the request cannot have; param names
// it for programs, the detail for people.
func invalidQuery(param, reason string) *problem.Problem {
	return problem.New(http.StatusBadRequest, param+": "+reason).WithType("invalid-query").With("param", param)
}

// queryProblem turns a list's refusal of an argument into invalidQuery.
func queryProblem(err error) error {
	if qe, ok := errors.AsType[*readmodel.QueryError](err); ok {
		return invalidQuery(qe.Param, qe.Reason)
	}
	return err
}

// invalidDefinition is the answer to a definition that fails validation, the same for
// storing and for validating only.
func invalidDefinition(verr *workflow.ValidationError) *problem.Problem {
	p := problem.New(http.StatusUnprocessableEntity, verr.Error()).WithType("invalid-definition").With("errors", verr.Errors)
	if len(verr.Warnings) > 0 {
		p = p.With("warnings", verr.Warnings)
	}
	return p
}

// queryParams returns the request's query parameters by name. A name not in allowed, or
// given twice, is refused. An empty value counts as absent, so that a form submitting
// every field, filled or not, lists what it means.
func queryParams(c echo.Context, allowed ...string) (map[string]string, error) {
	out := map[string]string{}
	params := c.QueryParams()
	// In name order, so that of several mistakes the same one is reported every time.
	for _, name := range slices.Sorted(maps.Keys(params)) {
		values := params[name]
		known := slices.Contains(allowed, name)
		switch {
		case !known && len(allowed) == 0:
			return nil, invalidQuery(name, "unknown parameter; this endpoint takes none")
		case !known:
			return nil, invalidQuery(name, "unknown parameter; this endpoint takes "+strings.Join(allowed, ", "))
		case len(values) > 1:
			return nil, invalidQuery(name, "given more than once")
		case values[0] != "":
			out[name] = values[0]
		}
	}
	return out, nil
}

// listQuery reads the query parameters of a list: its filters, by name, and the page
// (limit and cursor). Only package lists can read a cursor.
func listQuery(c echo.Context, filters ...string) (map[string]string, readmodel.Paging, error) {
	q, err := queryParams(c, append(filters, "limit", "cursor")...)
	if err != nil {
		return nil, readmodel.Paging{}, err
	}
	limit, err := readmodel.ParseLimit(q["limit"])
	if err != nil {
		return nil, readmodel.Paging{}, queryProblem(err)
	}
	return q, readmodel.Paging{Limit: limit, Cursor: q["cursor"]}, nil
}

// queryUUID reads an optional query parameter that is a UUID; nil when absent.
func queryUUID(q map[string]string, param string) (*uuid.UUID, error) {
	s, ok := q[param]
	if !ok {
		return nil, nil
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return nil, invalidQuery(param, "not a UUID")
	}
	return &id, nil
}

// servePage answers a page of a list, or the list's refusal of an argument.
func servePage[T any](c echo.Context, page readmodel.Page[T], err error) error {
	if err != nil {
		return queryProblem(err)
	}
	return c.JSON(http.StatusOK, page)
}

func (h *handlers) listWaitStates(c echo.Context) error {
	q, pg, err := listQuery(c, "status", "workflow", "node", "execution")
	if err != nil {
		return err
	}
	f := readmodel.WaitStateFilter{Status: q["status"], Workflow: q["workflow"], NodeID: q["node"]}
	if f.ExecutionID, err = queryUUID(q, "execution"); err != nil {
		return err
	}
	page, err := h.lists.WaitStates(c.Request().Context(), f, pg)
	return servePage(c, page, err)
}

func (h *handlers) getWaitState(c echo.Context) error {
	if _, err := queryParams(c); err != nil {
		return err
	}
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return problem.New(http.StatusBadRequest, "wait state id is not a UUID").WithType("malformed-id")
	}
	v, err := h.lists.WaitState(c.Request().Context(), id)
	if errors.Is(err, readmodel.ErrNotFound) {
		return problem.New(http.StatusNotFound, "no wait state "+id.String()).WithType("wait-not-found")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

func (h *handlers) listWorkflows(c echo.Context) error {
	_, pg, err := listQuery(c)
	if err != nil {
		return err
	}
	page, err := h.lists.Workflows(c.Request().Context(), pg)
	return servePage(c, page, err)
}

func (h *handlers) getWorkflow(c echo.Context) error {
	q, err := queryParams(c, "version")
	if err != nil {
		return err
	}
	name := c.Param("name")
	var version int32
	if s, ok := q["version"]; ok {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 1 {
			return invalidQuery("version", "must be a positive integer")
		}
		version = int32(n)
	}
	v, err := h.lists.Workflow(c.Request().Context(), name, version)
	if errors.Is(err, readmodel.ErrNotFound) {
		detail := "no workflow named " + name
		if version != 0 {
			detail = fmt.Sprintf("no version %d of workflow %s", version, name)
		}
		return problem.New(http.StatusNotFound, detail).WithType("workflow-not-found")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// validateWorkflow answers whether PUT would accept the body, storing nothing.
func (h *handlers) validateWorkflow(c echo.Context) error {
	if _, err := queryParams(c); err != nil {
		return err
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	res, err := h.ex.ValidateWorkflow(body)
	if verr, ok := errors.AsType[*workflow.ValidationError](err); ok {
		return invalidDefinition(verr)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

func (h *handlers) listExecutions(c echo.Context) error {
	q, pg, err := listQuery(c, "status", "workflow", "correlation_id", "created_from", "created_to")
	if err != nil {
		return err
	}
	f := readmodel.ExecutionFilter{Status: q["status"], Workflow: q["workflow"]}
	if f.CorrelationID, err = queryUUID(q, "correlation_id"); err != nil {
		return err
	}
	for _, tp := range []struct {
		param string
		dst   **time.Time
	}{{"created_from", &f.CreatedFrom}, {"created_to", &f.CreatedTo}} {
		if s, ok := q[tp.param]; ok {
			at, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return invalidQuery(tp.param, "must be an RFC 3339 time, such as 2026-01-02T15:04:05Z")
			}
			*tp.dst = &at
		}
	}
	page, err := h.lists.Executions(c.Request().Context(), f, pg)
	return servePage(c, page, err)
}
