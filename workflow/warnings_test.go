package workflow

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRequiredEventsIgnoredWithWarning: requiredEvents under a strategy other than
// custom is stored and ignored, and the one place that says so is a warning at its
// path; under custom it decides, and nothing is said.
func TestRequiredEventsIgnoredWithWarning(t *testing.T) {
	t.Parallel()
	both := `"apiCall": {"url": "http://a"}, "kafkaEvent": {"topic": "t"}`
	for _, tt := range []struct {
		name, data string
		warn       []FieldError
		required   []string
	}{
		{"all spelled out", `{` + both + `, "aggregationStrategy": "all", "requiredEvents": ["api_response", "kafka_event"]}`,
			[]FieldError{{Path: "nodes[0].data.requiredEvents", Message: `ignored: only used with aggregationStrategy "custom"; this node's strategy "all" decides what it waits for`}}, nil},
		{"default strategy", `{` + both + `, "requiredEvents": ["api_response"]}`,
			[]FieldError{{Path: "nodes[0].data.requiredEvents", Message: `ignored: only used with aggregationStrategy "custom"; this node's strategy "all" decides what it waits for`}}, nil},
		// Ignored, so not checked: naming a disabled event is no error under "any".
		{"any naming a disabled event", `{"apiCall": {"url": "http://a"}, "kafkaEvent": {"enabled": false}, "aggregationStrategy": "any", "requiredEvents": ["kafka_event"]}`,
			[]FieldError{{Path: "nodes[0].data.requiredEvents", Message: `ignored: only used with aggregationStrategy "custom"; this node's strategy "any" decides what it waits for`}}, nil},
		{"empty list says nothing", `{` + both + `, "requiredEvents": []}`, []FieldError{}, nil},
		{"custom decides", `{` + both + `, "aggregationStrategy": "custom", "requiredEvents": ["kafka_event"]}`, []FieldError{}, []string{"kafka_event"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wf := requireValid(t, []byte(waitNode(tt.data)))
			require.Equal(t, tt.warn, wf.Warnings())
			n, _ := wf.Node("wait")
			require.Equal(t, tt.required, n.Config.(*WaitEvents).RequiredEvents)
		})
	}
}

// TestWarningsBesideErrors: a definition with errors still reports its warnings, so
// one answer says everything, each list in document order.
func TestWarningsBesideErrors(t *testing.T) {
	t.Parallel()
	def := `{"name": "w", "nodes": [
	  {"id": "a", "type": "wait_events", "data": {"apiCall": {"url": "http://a"}, "requiredEvents": ["api_response"]}},
	  {"id": "b", "type": "wait_events", "data": {"kafkaEvent": {"topic": "t"}, "aggregationStrategy": "any", "requiredEvents": ["kafka_event"], "timeout": "0s"}}
	]}`
	_, err := Compile([]byte(def), nil)
	var ve *ValidationError
	require.True(t, errors.As(err, &ve))
	require.Len(t, ve.Errors, 1)
	require.Equal(t, "nodes[1].data.timeout", ve.Errors[0].Path)
	require.Equal(t, []string{"nodes[0].data.requiredEvents", "nodes[1].data.requiredEvents"},
		[]string{ve.Warnings[0].Path, ve.Warnings[1].Path})
}
