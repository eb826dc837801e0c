// Package problem owns the service's HTTP error format: RFC 7807 "problem
// details" bodies served as application/problem+json, and the Echo error
// handler that turns every error a handler or middleware returns into one.
//
// It does not decide which errors a handler reports or with which status;
// handlers build a *Problem (or return an *echo.HTTPError) and this package
// only renders it consistently, without leaking internal error text.
package problem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"
)

// ContentType is the media type RFC 7807 registers for JSON problem bodies.
const ContentType = "application/problem+json"

// TypeBaseURI prefixes the slugs given to WithType so that every problem type
// the service defines lives under one documented namespace.
const TypeBaseURI = "https://rendezvous.dev/problems/"

// defaultType is RFC 7807's value for "no more specific type than the status".
const defaultType = "about:blank"

// Problem is an RFC 7807 body served as application/problem+json.
//
// A *Problem is also an error, so handlers can simply return it and let
// ErrorHandler write it.
type Problem struct {
	// Type is a URI identifying the problem kind; empty means "about:blank".
	Type string `json:"type"`
	// Title is a short summary; empty means http.StatusText(Status).
	Title string `json:"title"`
	// Status is the HTTP status code, repeated in the body for clients that
	// only keep the body (logs, queues).
	Status int `json:"status"`
	// Detail explains this occurrence to a human.
	Detail string `json:"detail,omitempty"`
	// Instance identifies this occurrence; Write fills it with the request
	// path when empty.
	Instance string `json:"instance,omitempty"`
	// Extensions are merged into the top-level JSON object (for example
	// "errors" or "execution_id"). Keys naming a standard member are dropped
	// when marshalling so an extension can never contradict the status line.
	Extensions map[string]any `json:"-"`
}

// reserved are the standard members extensions may not override.
var reserved = map[string]bool{
	"type": true, "title": true, "status": true, "detail": true, "instance": true,
}

// New returns a Problem with the given status and detail; Type and Title take
// their defaults at marshalling time.
func New(status int, detail string) *Problem {
	return &Problem{Status: status, Detail: detail}
}

// RetryLater answers c's request with 503, a problem of type "unavailable" with the
// given detail, and Retry-After: 1 — the answer to a request that failed for now and
// that the client is right to send again: the database away, or a wait too contended
// to decide. It is the one place that shapes that answer; which failures earn it is the
// caller's to say. One second spaces a client's retries out while the trouble lasts, yet
// brings the retry soon after it has passed.
func RetryLater(c echo.Context, detail string) *Problem {
	c.Response().Header().Set("Retry-After", "1")
	return Unavailable(detail)
}

// Unavailable is RetryLater's problem, for a caller that must know the answer's status
// without answering (an audit row written before the response).
func Unavailable(detail string) *Problem {
	return New(http.StatusServiceUnavailable, detail).WithType("unavailable")
}

// With adds the extension member key=v and returns p for chaining.
func (p *Problem) With(key string, v any) *Problem {
	if p.Extensions == nil {
		p.Extensions = make(map[string]any)
	}
	p.Extensions[key] = v
	return p
}

// WithType sets Type to TypeBaseURI+slug and returns p for chaining.
func (p *Problem) WithType(slug string) *Problem {
	p.Type = TypeBaseURI + slug
	return p
}

// Error implements error so a *Problem can be returned from Echo handlers.
func (p *Problem) Error() string {
	msg := fmt.Sprintf("%d %s", p.Status, p.title())
	if p.Detail != "" {
		msg += ": " + p.Detail
	}
	return msg
}

func (p *Problem) title() string {
	if p.Title != "" {
		return p.Title
	}
	return http.StatusText(p.Status)
}

// MarshalJSON writes the standard members (with their defaults applied)
// followed by the extensions in key order, so output is deterministic.
func (p *Problem) MarshalJSON() ([]byte, error) {
	// A distinct type without methods avoids recursing into MarshalJSON.
	type standard Problem
	std := standard(*p)
	if std.Type == "" {
		std.Type = defaultType
	}
	std.Title = p.title()

	head, err := json.Marshal(std)
	if err != nil {
		return nil, err
	}

	keys := make([]string, 0, len(p.Extensions))
	for k := range p.Extensions {
		if !reserved[k] {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return head, nil
	}
	slices.Sort(keys)

	var buf bytes.Buffer
	buf.Grow(len(head) + 32*len(keys))
	buf.Write(head[:len(head)-1]) // drop the closing brace; members follow
	for _, k := range keys {
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vb, err := json.Marshal(p.Extensions[k])
		if err != nil {
			return nil, fmt.Errorf("problem extension %q: %w", k, err)
		}
		buf.WriteByte(',')
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(vb)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// Write sends p with the problem content type, filling Instance with the
// request path when it is empty.
//
// p itself is not modified: problems are often package-level values shared by
// concurrent requests. If the response was already committed nothing is
// written, because a second status line cannot reach the client.
func Write(c echo.Context, p *Problem) error {
	if c.Response().Committed {
		return nil
	}
	out := *p
	if out.Instance == "" {
		// Escaped: a URI reference, as RFC 7807 has it, whatever the path held.
		out.Instance = c.Request().URL.EscapedPath()
	}
	// net/http panics on status codes outside 100-999; an unset or bogus
	// status is a programming error best reported as a plain 500.
	if out.Status < 100 || out.Status > 599 {
		out.Status = http.StatusInternalServerError
	}
	if c.Request().Method == http.MethodHead {
		return c.NoContent(out.Status)
	}
	body, err := out.MarshalJSON()
	if err != nil {
		return fmt.Errorf("marshal problem: %w", err)
	}
	return c.Blob(out.Status, ContentType, body)
}

// ErrorHandler returns an echo.HTTPErrorHandler rendering every error as a
// problem:
//   - a *Problem (possibly wrapped) is written as is;
//   - an *echo.HTTPError (route not found, method not allowed, body limit,
//     bind errors, ...) becomes a Problem with its code and message;
//   - anything else is a 500 whose body carries no internal error text; the
//     error is logged with key "err" instead.
//
// A nil logger means slog.Default().
func ErrorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	if logger == nil {
		logger = slog.Default()
	}
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			// The handler already streamed a response; all that is left is
			// to make the failure visible to operators.
			logger.Warn("error after response was committed",
				"err", err, "method", c.Request().Method, "path", c.Request().URL.Path)
			return
		}
		p := fromError(err, logger, c)
		if werr := Write(c, p); werr != nil {
			logger.Error("writing problem response failed",
				"err", werr, "method", c.Request().Method, "path", c.Request().URL.Path)
		}
	}
}

// fromError maps err to the problem to send, logging what the client must not
// see.
func fromError(err error, logger *slog.Logger, c echo.Context) *Problem {
	if p, ok := errors.AsType[*Problem](err); ok {
		return p
	}
	if he, ok := errors.AsType[*echo.HTTPError](err); ok {
		// Echo nests the meaningful HTTPError in Internal in some paths; the
		// default handler unwraps the same way.
		if inner, ok := he.Internal.(*echo.HTTPError); ok {
			he = inner
		}
		if he.Code >= http.StatusInternalServerError || he.Internal != nil {
			logger.Log(c.Request().Context(), levelFor(he.Code), "request failed",
				"err", err, "status", he.Code, "method", c.Request().Method, "path", c.Request().URL.Path)
		}
		return New(he.Code, httpErrorDetail(he))
	}
	logger.Error("request failed",
		"err", err, "method", c.Request().Method, "path", c.Request().URL.Path)
	return New(http.StatusInternalServerError, "")
}

// httpErrorDetail extracts a human message from an echo.HTTPError. Only the
// Message is used: Internal may hold parser or I/O errors not meant for
// clients. A message equal to the status text would merely repeat the title.
func httpErrorDetail(he *echo.HTTPError) string {
	var msg string
	switch m := he.Message.(type) {
	case nil:
		return ""
	case string:
		msg = m
	case error:
		msg = m.Error()
	default:
		msg = fmt.Sprint(m)
	}
	if msg == http.StatusText(he.Code) {
		return ""
	}
	return msg
}

func levelFor(status int) slog.Level {
	if status >= http.StatusInternalServerError {
		return slog.LevelError
	}
	// Client mistakes are routine; keep them out of default-level logs.
	return slog.LevelDebug
}
