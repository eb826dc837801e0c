// Package client is a small typed client of rendezvous's operator HTTP API (/api/v1):
// storing and reading workflow definitions, starting, reading and cancelling
// executions, listing and reading wait states, sending events to an execution and
// listing the events that reached no wait. The rendezvous command's workflows,
// executions, waits and events subcommands are built on it.
//
// It owns the wire types as a client sees them and turns every answer that is not a
// success into an *Error carrying the server's RFC 7807 problem. It does not know how
// the server stores or decides anything, and it imports nothing of the server but the
// problem type namespace.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/rendezvous-run/rendezvous/internal/problem"
)

// maxResponseBytes bounds what is read of one answer: a page of 500 waits is far below
// it, and a misdirected --server (a file server, a proxy's error page) cannot make the
// client read forever.
const maxResponseBytes = 64 << 20

// Client talks to one rendezvous server. It is safe for concurrent use.
type Client struct {
	base  string // scheme://host[/prefix], without a trailing slash
	http  *http.Client
	token string
}

// WithToken returns a copy of c that sends token as "Authorization: Bearer <token>";
// an empty token sends none.
func (c *Client) WithToken(token string) *Client {
	cp := *c
	cp.token = token
	return &cp
}

// New returns a client of the server at serverURL, an http(s) URL optionally with a
// path prefix (a server behind a reverse proxy at /rendezvous). A nil hc means
// http.DefaultClient, which has no timeout.
func New(serverURL string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("server URL: want http(s)://host[:port][/prefix], not %q", serverURL)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(u.String(), "/"), http: hc}, nil
}

// Server is the base URL requests go to.
func (c *Client) Server() string { return c.base }

// Error is an answer of the server that is not a success: its RFC 7807 problem, or,
// when the body is not one (a proxy in between, a server too old for the route), the
// status alone.
type Error struct {
	// Method and Path name the request, for messages about untyped problems.
	Method, Path string
	// Status is the HTTP status code.
	Status int
	// Type is the problem type URI ("about:blank" when the status says it all).
	Type   string
	Title  string
	Detail string
	// Errors lists every problem of an invalid definition, with its JSON path.
	Errors []FieldError
	// Body is the problem as sent, extension members included.
	Body json.RawMessage
}

// FieldError is one problem of a definition.
type FieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Slug is the problem type without the service's namespace ("execution-not-found"), or
// "" for an untyped problem.
func (e *Error) Slug() string {
	if slug, ok := strings.CutPrefix(e.Type, problem.TypeBaseURI); ok {
		return slug
	}
	if e.Type == "" || e.Type == "about:blank" {
		return ""
	}
	return e.Type
}

// Error reads "404 execution-not-found: no execution …"; an invalid definition lists
// its problems: "422 invalid-definition: name: required; edges[0].target: unknown node".
// An untyped problem names its status text and the request instead, which is what
// tells a wrong --server or an older server apart: "404 Not Found: GET /api/v1/wait-states".
func (e *Error) Error() string {
	msg := e.head()
	switch {
	case len(e.Errors) > 0:
		parts := make([]string, len(e.Errors))
		for i, fe := range e.Errors {
			parts[i] = fe.String()
		}
		return msg + ": " + strings.Join(parts, "; ")
	case e.Detail != "":
		return msg + ": " + e.Detail
	}
	return msg + ": " + e.Method + " " + e.Path
}

// Headline is Error without the list of problems, for callers that show them one per
// line: "422 invalid-definition (3 errors)".
func (e *Error) Headline() string {
	if len(e.Errors) == 0 {
		return e.Error()
	}
	noun := "errors"
	if len(e.Errors) == 1 {
		noun = "error"
	}
	return fmt.Sprintf("%s (%d %s)", e.head(), len(e.Errors), noun)
}

func (e *Error) head() string {
	what := e.Slug()
	if what == "" {
		what = e.Title
		if what == "" {
			what = http.StatusText(e.Status)
		}
	}
	return fmt.Sprintf("%d %s", e.Status, what)
}

// String reads "path: message", or the message alone for the definition as a whole.
func (fe FieldError) String() string {
	if fe.Path == "" {
		return fe.Message
	}
	return fe.Path + ": " + fe.Message
}

// TransportError is a request that got no HTTP answer: connection refused, DNS,
// TLS, a timeout. The server may not have seen it at all.
type TransportError struct {
	Method, URL string
	Err         error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("%s %s: %v", e.Method, e.URL, e.Err)
}

func (e *TransportError) Unwrap() error { return e.Err }

// ResponseError is a success status whose body is not what the API sends, which means
// --server points at something that is not rendezvous (or not this version of it).
type ResponseError struct {
	Method, URL string
	Status      int
	Err         error
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("%s %s: %d answer is not the API's: %v", e.Method, e.URL, e.Status, e.Err)
}

func (e *ResponseError) Unwrap() error { return e.Err }

// do sends one request and decodes a successful JSON answer into out (when not nil),
// returning the status. body is sent as JSON when not nil.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body []byte, out any) (int, error) {
	target := c.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, target, err)
	}
	req.Header.Set("Accept", "application/json, "+problem.ContentType)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// url.Error repeats method and URL; keep only its cause.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return 0, &TransportError{Method: method, URL: target, Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return resp.StatusCode, &TransportError{Method: method, URL: target, Err: fmt.Errorf("reading the answer: %w", err)}
	}
	if len(raw) > maxResponseBytes {
		return resp.StatusCode, &ResponseError{Method: method, URL: target, Status: resp.StatusCode, Err: fmt.Errorf("larger than %d bytes", maxResponseBytes)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, problemError(method, path, resp, raw)
	}
	if out == nil {
		return resp.StatusCode, nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return resp.StatusCode, &ResponseError{Method: method, URL: target, Status: resp.StatusCode, Err: err}
	}
	return resp.StatusCode, nil
}

// problemError reads an error answer. A body that is not a problem still yields an
// *Error with the status, so that callers decide on the status alone.
func problemError(method, path string, resp *http.Response, raw []byte) *Error {
	e := &Error{Method: method, Path: path, Status: resp.StatusCode}
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if media != problem.ContentType && media != "application/json" {
		return e
	}
	var p struct {
		Type   string       `json:"type"`
		Title  string       `json:"title"`
		Detail string       `json:"detail"`
		Errors []FieldError `json:"errors"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return e
	}
	e.Type, e.Title, e.Detail, e.Errors, e.Body = p.Type, p.Title, p.Detail, p.Errors, raw
	return e
}
