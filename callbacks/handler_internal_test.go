package callbacks

// FuzzParse lives apart from handler_test.go: it needs the unexported parse, and an
// internal test file cannot import server (which imports this package), which
// the HTTP-level tests in package callbacks_test do.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
)

func FuzzParse(f *testing.F) {
	const (
		exec = "4f1f8a3c-3f3e-4c1b-9a55-3c9f1d1c2b10"
		corr = "9b2e6c1d-8d7a-4d8e-b1a0-5c6d7e8f9a0b"
	)
	seeds := []struct{ hdrExec, hdrCorr, body string }{
		{"", "", `{"execution_id":"` + exec + `","correlation_id":"` + corr + `","result":1}`},
		{exec, corr, ``},
		{exec, corr, `[1,2,3]`},
		{exec, "", `{"correlation_id":"` + corr + `"}`},
		{"", "", `{"execution_id":"` + exec + `"}`},
		{"", "", `{"execution_id":"not-a-uuid","correlation_id":"` + corr + `"}`},
		{" " + exec + " ", corr, `null`},
		{"", "", `{"execution_id":`},
		{"", "", "\xff\xfe"},
		{"", "", `{"execution_id":1,"correlation_id":{"a":"b"}}`},
		{"{" + exec + "}", "urn:uuid:" + corr, `"text"`},
		{"", "", `{"amount":1e400,"execution_id":"` + exec + `","correlation_id":"` + corr + `"}`},
	}
	for _, s := range seeds {
		f.Add(s.hdrExec, s.hdrCorr, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, hdrExec, hdrCorr string, body []byte) {
		h := http.Header{}
		if hdrExec != "" {
			h.Set(HeaderExecutionID, hdrExec)
		}
		if hdrCorr != "" {
			h.Set(HeaderCorrelationID, hdrCorr)
		}
		ev, p := parse(h, body, false)
		if p != nil {
			require.Equal(t, http.StatusBadRequest, p.Status, "parse only rejects with 400")
			require.NotEmpty(t, p.Detail)
			require.NotEmpty(t, p.Type)
			return
		}
		// Accepted: each id is a UUID taken from its header, or from its body field when
		// the header is blank.
		var obj map[string]any
		_ = json.Unmarshal(body, &obj)
		for _, id := range []struct {
			got         uuid.UUID
			header, key string
		}{{ev.ExecutionID, hdrExec, FieldExecutionID}, {ev.CorrelationID, hdrCorr, FieldCorrelationID}} {
			raw := strings.TrimSpace(id.header)
			if raw == "" {
				raw, _ = obj[id.key].(string)
			}
			want, err := uuid.Parse(raw)
			require.NoError(t, err, "accepted %s %q is not a UUID", id.key, raw)
			require.Equal(t, want, id.got)
		}
		require.Equal(t, aggregator.EventAPIResponse, ev.Name)
		require.True(t, json.Valid(ev.Payload), "payload %q is not JSON", ev.Payload)
		// An accepted body that is JSON is passed through unchanged.
		if json.Valid(body) {
			require.Equal(t, string(body), string(ev.Payload))
		}
	})
}
