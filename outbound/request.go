package outbound

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/rendezvous-run/rendezvous/workflow"
	"github.com/rendezvous-run/rendezvous/workflow/template"
)

// Request is a rendered outbound HTTP request. Its secrets are references until
// Client.Do sends it: what it holds may be logged and stored.
type Request struct {
	Method  string
	URL     string
	Headers http.Header
	Body    []byte
	// mark is the mark of the render's secret references (template.SecretRef).
	mark string
	// jsonBody says Body was encoded as JSON, so a secret in it is JSON-escaped.
	jsonBody bool
}

// Target names the request in messages: its method and URL, secrets as referenced.
func (r *Request) Target() string { return r.Method + " " + r.display(r.URL) }

// display returns s with the request's secret references as the definition wrote them.
func (r *Request) display(s string) string {
	if r.mark == "" {
		return s
	}
	return strings.ReplaceAll(s, ":"+r.mark+"}", "}")
}

// Build renders a wait's correlated call and injects the two ids into the configured
// body fields and headers, plus Idempotency-Key: the correlation id, so the external
// service can absorb the retries of an at-least-once outbox.
//
// A body written as a string gets the ids in its fields too when it renders to a JSON
// object (a template built by hand, "{\"order\": \"@{_trigger.id}\"}"): it is then sent
// as that object, as JSON. Any other string — a form, XML, text — is sent as it
// rendered, and the ids travel in the headers only.
func Build(c *workflow.APICall, scope template.Scope, executionID, correlationID uuid.UUID) (*Request, error) {
	req, body, err := Render(c.Method, c.URL, c.Headers, c.Body, scope, "apiCall")
	if err != nil {
		return nil, err
	}
	if s, ok := body.(string); ok {
		if obj, ok := jsonObject(s); ok {
			body = obj
		}
	}
	switch b := body.(type) {
	case map[string]any:
		setField(b, c.ExecutionIDField, executionID.String())
		setField(b, c.CorrelationIDField, correlationID.String())
	case nil:
		if req.Method != http.MethodGet && req.Method != http.MethodDelete {
			b2 := map[string]any{}
			setField(b2, c.ExecutionIDField, executionID.String())
			setField(b2, c.CorrelationIDField, correlationID.String())
			body = b2
		}
	}
	if err := Encode(req, body); err != nil {
		return nil, err
	}
	req.Headers.Set(c.ExecutionIDHeader, executionID.String())
	req.Headers.Set(c.CorrelationIDHeader, correlationID.String())
	req.Headers.Set("Idempotency-Key", correlationID.String())
	return req, nil
}

// Render renders a request's URL and headers into a Request, and its body into a value
// for Encode; where names the definition's field in errors ("apiCall", "data"). Secrets
// stay references (template.RootSecrets), marked for this request alone.
func Render(method, url string, headers map[string]string, body any, scope template.Scope, where string) (*Request, any, error) {
	scope.SecretMark = newMark()
	u, err := template.RenderString(url, scope)
	if err != nil {
		return nil, nil, fmt.Errorf("%s.url: %w", where, err)
	}
	req := &Request{Method: method, URL: u, Headers: http.Header{}, mark: scope.SecretMark}
	for k, v := range headers {
		hv, err := template.RenderString(v, scope)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.headers.%s: %w", where, k, err)
		}
		req.Headers.Set(k, hv)
	}
	var rendered any
	if body != nil {
		rendered, err = template.Render(body, scope)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.body: %w", where, err)
		}
	}
	return req, rendered, nil
}

// Encode sets req's body: a string as text, anything else as JSON, each with its
// Content-Type unless the definition set one.
func Encode(req *Request, body any) error {
	switch b := body.(type) {
	case nil:
		return nil
	case string:
		req.Body = []byte(b)
		if req.Headers.Get("Content-Type") == "" {
			req.Headers.Set("Content-Type", "text/plain; charset=utf-8")
		}
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return fmt.Errorf("encode body: %w", err)
		}
		req.Body, req.jsonBody = raw, true
		if req.Headers.Get("Content-Type") == "" {
			req.Headers.Set("Content-Type", "application/json")
		}
	}
	return nil
}

// jsonObject decodes s when it is exactly one JSON object, numbers kept as written
// (json.Number), so that re-encoding it changes no value.
func jsonObject(s string) (map[string]any, bool) {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "{") {
		return nil, false
	}
	d := json.NewDecoder(strings.NewReader(t))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, false
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, false
	}
	return m, true
}

// setField sets a possibly dotted field, creating objects on the way.
func setField(m map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}

// Response is what an outbound call answered, trimmed for storage and messages.
type Response struct {
	Status  int
	Headers http.Header
	Body    []byte
}

// maxResponseBytes bounds what is read of a response: outputs live in the database.
const maxResponseBytes = 1 << 20

// Excerpt returns the start of a body for error messages. It ends up in text columns,
// so it must be text PostgreSQL accepts: valid UTF-8 without NUL bytes, cut at a
// character boundary.
func Excerpt(b []byte) string {
	const n = 512
	s := strings.ToValidUTF8(string(b), "?")
	s = strings.ReplaceAll(s, "\x00", "?")
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return s[:cut] + "…"
	}
	return s
}
