package workflow

import (
	"errors"
	"strings"
	"testing"
)

func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		orderFlow,
		`{}`,
		`{"name": "x",}`,
		waitNode(`{"apiCall": {"url": "@{_vars.serviceUrl}/process"}, "kafkaEvent": {"topic": "t", "filter": {"a.b": 1}}, "aggregationStrategy": "custom", "requiredEvents": ["kafka_event"]}`),
		httpNode(`{"url": "https://a/@{_trigger.id}", "timeout": "5s", "body": {"x": ["@{nodes.a.output.b}"]}}`),
		`{"name": "c", "nodes": [{"id": "a", "type": "wait_events"}, {"id": "b", "type": "wait_events"}], "edges": [{"source": "a", "target": "b", "condition": "output.x > 1"}, {"source": "b", "target": "a"}]}`,
	} {
		f.Add([]byte(s))
	}
	reg := BuiltinRegistry()
	f.Fuzz(func(t *testing.T, raw []byte) {
		wf, err := Compile(raw, reg)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("error %v is not a non-empty *ValidationError", err)
			}
			for _, fe := range ve.Errors {
				// Compile recovers panics as "internal error"; for the
				// fuzzer that is still a bug.
				if strings.Contains(fe.Message, "internal error") {
					t.Fatalf("internal error: %s", fe)
				}
			}
			return
		}
		if len(wf.Nodes()) == 0 || len(wf.Roots()) == 0 {
			t.Fatalf("compiled workflow without nodes or roots")
		}
		env := map[string]any{"output": map[string]any{"x": 1}}
		for _, n := range wf.Nodes() {
			if w, ok := n.Config.(*WaitEvents); ok {
				_ = w.Expected()
			}
			for _, e := range wf.Outgoing(n.ID) {
				_, _ = e.Eval(env)
			}
		}
	})
}
