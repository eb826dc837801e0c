package problem_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/internal/problem"
)

func TestMarshalJSON(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		p    *problem.Problem
		want string
	}{
		{
			name: "defaults",
			p:    problem.New(http.StatusNotFound, ""),
			want: `{"type":"about:blank","title":"Not Found","status":404}`,
		},
		{
			name: "all members",
			p: &problem.Problem{
				Type: "https://example.com/x", Title: "Custom", Status: 409,
				Detail: "already done", Instance: "/a/b",
			},
			want: `{"type":"https://example.com/x","title":"Custom","status":409,"detail":"already done","instance":"/a/b"}`,
		},
		{
			name: "typed with sorted extensions",
			p: problem.New(http.StatusUnprocessableEntity, "bad input").
				WithType("late-event").
				With("execution_id", "e-1").
				With("errors", []string{"a", "b"}),
			want: `{"type":"https://rendezvous.dev/problems/late-event","title":"Unprocessable Entity","status":422,"detail":"bad input","errors":["a","b"],"execution_id":"e-1"}`,
		},
		{
			name: "extensions cannot override standard members",
			p: problem.New(http.StatusBadRequest, "d").
				With("status", 200).With("type", "x").With("title", "t").
				With("detail", "other").With("instance", "/i").With("ok", true),
			want: `{"type":"about:blank","title":"Bad Request","status":400,"detail":"d","ok":true}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := json.Marshal(tt.p)
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(got))
			// Standard members come first and the order is deterministic.
			require.Equal(t, tt.want, string(got))
		})
	}
}

func TestMarshalJSONExtensionError(t *testing.T) {
	t.Parallel()
	_, err := json.Marshal(problem.New(500, "").With("bad", make(chan int)))
	require.ErrorContains(t, err, `"bad"`)
}

func TestError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    *problem.Problem
		want string
	}{
		{problem.New(404, ""), "404 Not Found"},
		{problem.New(409, "already done"), "409 Conflict: already done"},
		{&problem.Problem{Status: 400, Title: "Nope"}, "400 Nope"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			var err error = tt.p
			require.Equal(t, tt.want, err.Error())
		})
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()

	shared := problem.New(http.StatusConflict, "dup").WithType("duplicate")
	tests := []struct {
		name       string
		method     string
		p          *problem.Problem
		wantStatus int
		wantBody   string
	}{
		{
			name: "fills instance", method: http.MethodPost, p: shared,
			wantStatus: 409,
			wantBody:   `{"type":"https://rendezvous.dev/problems/duplicate","title":"Conflict","status":409,"detail":"dup","instance":"/things/1"}`,
		},
		{
			name: "keeps instance", method: http.MethodGet,
			p:          &problem.Problem{Status: 400, Instance: "urn:x"},
			wantStatus: 400,
			wantBody:   `{"type":"about:blank","title":"Bad Request","status":400,"instance":"urn:x"}`,
		},
		{
			name: "invalid status becomes 500", method: http.MethodGet,
			p:          &problem.Problem{Detail: "oops"},
			wantStatus: 500,
			wantBody:   `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"oops","instance":"/things/1"}`,
		},
		{
			name: "head has no body", method: http.MethodHead, p: shared,
			wantStatus: 409,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := echo.New()
			rec := httptest.NewRecorder()
			c := e.NewContext(httptest.NewRequest(tt.method, "/things/1?q=1", nil), rec)

			require.NoError(t, problem.Write(c, tt.p))
			require.Equal(t, tt.wantStatus, rec.Code)
			if tt.wantBody == "" {
				require.Empty(t, rec.Body.String())
				return
			}
			require.Equal(t, problem.ContentType, rec.Header().Get(echo.HeaderContentType))
			require.JSONEq(t, tt.wantBody, rec.Body.String())
		})
	}
	// The shared value must not have been mutated by Write.
	require.Empty(t, shared.Instance)
}

func TestWriteCommitted(t *testing.T) {
	t.Parallel()
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), rec)
	require.NoError(t, c.String(http.StatusOK, "done"))

	require.NoError(t, problem.Write(c, problem.New(500, "late")))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "done", rec.Body.String())
}

// TestRetryLater: the answer to a request worth sending again is a 503 of type
// "unavailable" with Retry-After, as written by the error handler.
func TestRetryLater(t *testing.T) {
	t.Parallel()
	e, _ := newServer(t)
	e.GET("/", func(c echo.Context) error { return problem.RetryLater(c, "not now") })
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Equal(t, problem.TypeBaseURI+"unavailable", body["type"])
	require.Equal(t, "not now", body["detail"])
	require.Equal(t, problem.Unavailable("not now").Status, rec.Code)
}

// newServer returns an Echo instance using ErrorHandler and a buffer holding
// what it logged.
func newServer(t *testing.T) (*echo.Echo, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := echo.New()
	e.HTTPErrorHandler = problem.ErrorHandler(logger)
	return e, &logs
}

func TestErrorHandler(t *testing.T) {
	t.Parallel()

	const secret = "dial tcp 10.0.0.7:5432: connection refused"
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		setup      func(e *echo.Echo)
		wantStatus int
		wantBody   map[string]any
		wantLog    string // substring expected in logs, "" for no logs
	}{
		{
			name: "problem returned as is", method: http.MethodGet, path: "/p",
			setup: func(e *echo.Echo) {
				e.GET("/p", func(echo.Context) error {
					return problem.New(http.StatusGone, "too late").WithType("late-event").With("execution_id", "e-9")
				})
			},
			wantStatus: 410,
			wantBody: map[string]any{
				"type": "https://rendezvous.dev/problems/late-event", "title": "Gone", "status": 410.0,
				"detail": "too late", "instance": "/p", "execution_id": "e-9",
			},
		},
		{
			name: "wrapped problem", method: http.MethodGet, path: "/w",
			setup: func(e *echo.Echo) {
				e.GET("/w", func(echo.Context) error {
					return fmt.Errorf("ctx: %w", problem.New(http.StatusConflict, "dup"))
				})
			},
			wantStatus: 409,
			wantBody:   map[string]any{"type": "about:blank", "title": "Conflict", "status": 409.0, "detail": "dup", "instance": "/w"},
		},
		{
			name: "route not found", method: http.MethodGet, path: "/missing",
			setup:      func(*echo.Echo) {},
			wantStatus: 404,
			wantBody:   map[string]any{"type": "about:blank", "title": "Not Found", "status": 404.0, "instance": "/missing"},
		},
		{
			name: "method not allowed", method: http.MethodDelete, path: "/only-get",
			setup: func(e *echo.Echo) {
				e.GET("/only-get", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
			},
			wantStatus: 405,
			wantBody:   map[string]any{"type": "about:blank", "title": "Method Not Allowed", "status": 405.0, "instance": "/only-get"},
		},
		{
			name: "body limit", method: http.MethodPost, path: "/upload", body: strings.Repeat("x", 64),
			setup: func(e *echo.Echo) {
				// What middleware.BodyLimit returns; importing it would pull
				// golang.org/x/time into this package's tests.
				e.POST("/upload", func(echo.Context) error { return echo.ErrStatusRequestEntityTooLarge })
			},
			wantStatus: 413,
			wantBody:   map[string]any{"type": "about:blank", "title": "Request Entity Too Large", "status": 413.0, "instance": "/upload"},
		},
		{
			name: "bind error", method: http.MethodPost, path: "/bind", body: `{"n": "not a number"}`,
			setup: func(e *echo.Echo) {
				e.POST("/bind", func(c echo.Context) error {
					var v struct {
						N int `json:"n"`
					}
					return c.Bind(&v)
				})
			},
			wantStatus: 400,
			wantLog:    `"status":400`,
		},
		{
			name: "http error with message", method: http.MethodGet, path: "/h",
			setup: func(e *echo.Echo) {
				e.GET("/h", func(echo.Context) error {
					return echo.NewHTTPError(http.StatusUnauthorized, "missing token")
				})
			},
			wantStatus: 401,
			wantBody:   map[string]any{"type": "about:blank", "title": "Unauthorized", "status": 401.0, "detail": "missing token", "instance": "/h"},
		},
		{
			name: "http error internal is logged not sent", method: http.MethodGet, path: "/hi",
			setup: func(e *echo.Echo) {
				e.GET("/hi", func(echo.Context) error {
					return echo.NewHTTPError(http.StatusServiceUnavailable, "try later").SetInternal(errors.New(secret))
				})
			},
			wantStatus: 503,
			wantBody:   map[string]any{"type": "about:blank", "title": "Service Unavailable", "status": 503.0, "detail": "try later", "instance": "/hi"},
			wantLog:    secret,
		},
		{
			name: "plain error is an opaque 500", method: http.MethodGet, path: "/boom",
			setup: func(e *echo.Echo) {
				e.GET("/boom", func(echo.Context) error { return fmt.Errorf("query: %w", errors.New(secret)) })
			},
			wantStatus: 500,
			wantBody:   map[string]any{"type": "about:blank", "title": "Internal Server Error", "status": 500.0, "instance": "/boom"},
			wantLog:    secret,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, logs := newServer(t)
			tt.setup(e)
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			if tt.body != "" {
				req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
			}
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)

			require.Equal(t, tt.wantStatus, rec.Code)
			require.Equal(t, problem.ContentType, rec.Header().Get(echo.HeaderContentType))
			require.NotContains(t, rec.Body.String(), secret)

			var got map[string]any
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
			require.Equal(t, float64(tt.wantStatus), got["status"])
			if tt.wantBody != nil {
				require.Equal(t, tt.wantBody, got)
			}
			if tt.wantLog == "" {
				require.Empty(t, logs.String())
			} else {
				require.Contains(t, logs.String(), tt.wantLog)
				require.Contains(t, logs.String(), `"err":`)
			}
		})
	}
}

func TestErrorHandlerCommitted(t *testing.T) {
	t.Parallel()
	e, logs := newServer(t)
	e.GET("/partial", func(c echo.Context) error {
		if err := c.String(http.StatusOK, "partial"); err != nil {
			return err
		}
		return errors.New("failed mid-stream")
	})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/partial", nil))

	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "partial", rec.Body.String())
	require.Contains(t, logs.String(), "failed mid-stream")
}

func TestErrorHandlerNilLogger(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.HTTPErrorHandler = problem.ErrorHandler(nil)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nowhere", nil))
	require.Equal(t, http.StatusNotFound, rec.Code)
}
