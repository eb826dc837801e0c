package outbound

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/workflow"
	"github.com/rendezvous-run/rendezvous/workflow/template"
)

// TestBuildInjectsIdsIntoBodies: the ids go into an object body, into a string body
// that renders to a JSON object (which is then sent as JSON), and into the headers
// always; any other string body is sent as it rendered.
func TestBuildInjectsIdsIntoBodies(t *testing.T) {
	t.Parallel()
	exec, corr := uuid.New(), uuid.New()
	scope := template.Scope{Trigger: map[string]any{"order": "A-1", "amount": json.Number("12345678901234567890.5")}}
	call := func(body any, headers map[string]string) *workflow.APICall {
		return &workflow.APICall{URL: "http://127.0.0.1:1/x", Method: http.MethodPost, Headers: headers, Body: body,
			CorrelationIDField: "meta.correlation_id", ExecutionIDField: "execution_id",
			CorrelationIDHeader: "X-Correlation-Id", ExecutionIDHeader: "X-Execution-Id"}
	}
	for _, tt := range []struct {
		name        string
		body        any
		headers     map[string]string
		wantBody    string // JSON compared as JSON, or text compared as is
		json        bool
		contentType string
	}{
		{"object", map[string]any{"order": "@{_trigger.order}"}, nil,
			`{"order": "A-1", "execution_id": "` + exec.String() + `", "meta": {"correlation_id": "` + corr.String() + `"}}`, true, "application/json"},
		{"string rendering to an object", `{"order": "@{_trigger.order}", "amount": @{_trigger.amount}, "meta": {"kept": 1}}`, nil,
			`{"order": "A-1", "amount": 12345678901234567890.5, "execution_id": "` + exec.String() + `", "meta": {"kept": 1, "correlation_id": "` + corr.String() + `"}}`, true, "application/json"},
		{"string object keeps its own content type", ` {"order": "@{_trigger.order}"} `, map[string]string{"Content-Type": "application/vnd.order+json"},
			`{"order": "A-1", "execution_id": "` + exec.String() + `", "meta": {"correlation_id": "` + corr.String() + `"}}`, true, "application/vnd.order+json"},
		{"form", `order=@{_trigger.order}&x=1`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
			`order=A-1&x=1`, false, "application/x-www-form-urlencoded"},
		{"xml", `<order id="@{_trigger.order}"/>`, nil, `<order id="A-1"/>`, false, "text/plain; charset=utf-8"},
		{"a JSON array string", `["@{_trigger.order}"]`, nil, `["A-1"]`, false, "text/plain; charset=utf-8"},
		{"two objects", `{"a": 1} {"b": 2}`, nil, `{"a": 1} {"b": 2}`, false, "text/plain; charset=utf-8"},
		{"not quite JSON", `{"order": "@{_trigger.order}",}`, nil, `{"order": "A-1",}`, false, "text/plain; charset=utf-8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := Build(call(tt.body, tt.headers), scope, exec, corr)
			require.NoError(t, err)
			if tt.json {
				require.JSONEq(t, tt.wantBody, string(req.Body))
			} else {
				require.Equal(t, tt.wantBody, string(req.Body))
			}
			require.Equal(t, tt.contentType, req.Headers.Get("Content-Type"))
			require.Equal(t, exec.String(), req.Headers.Get("X-Execution-Id"))
			require.Equal(t, corr.String(), req.Headers.Get("X-Correlation-Id"))
			require.Equal(t, corr.String(), req.Headers.Get("Idempotency-Key"))
		})
	}
}
