package api

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/internal/problem"
)

// Unavailable is the problem of a request that failed because the database is away
// (db.IsUnavailable), or nil for any other outcome (a problem already chosen stands).
// The service answers it with 503 and Retry-After on every route.
func Unavailable(err error) *problem.Problem {
	if err == nil || !db.IsUnavailable(err) {
		return nil
	}
	if _, ok := errors.AsType[*problem.Problem](err); ok {
		return nil
	}
	return problem.Unavailable("the database is unavailable; nothing was changed, retry later")
}

// StatusOf is the status a request is answered with, before the error handler has
// written an error. It is the one answer to that question: the operator-action log line
// and the audit log both name it, and name what the client was sent.
func StatusOf(c echo.Context, err error) int {
	if err == nil {
		return c.Response().Status
	}
	if p := Unavailable(err); p != nil {
		return p.Status
	}
	if p, ok := errors.AsType[*problem.Problem](err); ok {
		return p.Status
	}
	if he, ok := errors.AsType[*echo.HTTPError](err); ok {
		return he.Code
	}
	return http.StatusInternalServerError
}
