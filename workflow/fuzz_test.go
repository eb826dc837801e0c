package workflow

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzCompile checks that Compile never panics and always explains a
// rejection, and that it agrees with the published schema: every error an
// editor reports with nothing but the schema files is one Compile reports
// (same path, same message), and a definition Compile accepts passes the
// schema.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		orderFlow,
		`{}`,
		`{"name": "x",}`,
		waitNode(`{"apiCall": {"url": "@{_vars.serviceUrl}/process"}, "kafkaEvent": {"topic": "t", "filter": {"a.b": 1}}, "aggregationStrategy": "custom", "requiredEvents": ["kafka_event"]}`),
		httpNode(`{"url": "https://a/@{_trigger.id}", "timeout": "5s", "body": {"x": ["@{nodes.a.output.b}"]}}`),
		`{"name": "c", "nodes": [{"id": "a", "type": "wait_events"}, {"id": "b", "type": "wait_events"}], "edges": [{"source": "a", "target": "b", "condition": "output.x > 1"}, {"source": "b", "target": "a"}]}`,
		timerNode(`{"untilTime": "09:30", "timezone": "Europe/Berlin", "days": ["mon", "fri"]}`),
	} {
		f.Add([]byte(s))
	}
	corpus, err := filepath.Glob("testdata/*/*.json")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range corpus {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	reg := BuiltinRegistry()
	f.Fuzz(func(t *testing.T, raw []byte) {
		wf, err := Compile(raw, reg)
		var fromSchema []string
		if json.Valid(raw) {
			fromSchema = editorErrors(t, raw)
		}
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("error %v is not a non-empty *ValidationError", err)
			}
			var got []string
			for _, fe := range ve.Errors {
				// Compile recovers panics as "internal error"; for the
				// fuzzer that is still a bug.
				if strings.Contains(fe.Message, "internal error") {
					t.Fatalf("internal error: %s", fe)
				}
				got = append(got, fe.String())
			}
			for _, e := range fromSchema {
				if !slices.Contains(got, e) {
					t.Fatalf("the schema reports %q, Compile does not: %q", e, got)
				}
			}
			return
		}
		if len(fromSchema) > 0 {
			t.Fatalf("Compile accepts a definition the schema rejects: %q", fromSchema)
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
