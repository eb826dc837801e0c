package api

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/internal/problem"
)

// TestActionRecordsOutcome: every recovery action passes through action, which records
// its name, path and outcome — the status written, the problem returned, or 500 for
// another error.
func TestActionRecordsOutcome(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	h := &handlers{logger: slog.New(slog.NewTextHandler(&logs, nil))}
	e := echo.New()
	e.HTTPErrorHandler = problem.ErrorHandler(slog.New(slog.DiscardHandler))
	e.POST("/ok", h.action("test.ok", func(c echo.Context) error { return c.NoContent(http.StatusCreated) }))
	e.POST("/refused", h.action("test.refused", func(echo.Context) error {
		return problem.New(http.StatusConflict, "no").WithType("refused")
	}))
	e.POST("/broken", h.action("test.broken", func(echo.Context) error { return errors.New("boom") }))
	for path, want := range map[string]string{"/ok": "201", "/refused": "409", "/broken": "500"} {
		logs.Reset()
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, nil))
		line := logs.String()
		require.Contains(t, line, `msg="operator action" action=test.`+strings.TrimPrefix(path, "/")+" path="+path)
		require.Contains(t, line, "status="+want)
	}
}
