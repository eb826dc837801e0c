package workflow

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSummary(t *testing.T) {
	t.Setenv("RENDEZVOUS_VAR_SECRET", "hunter2")
	for _, c := range []struct {
		name, display, input, want string
	}{
		{"template", "@{_trigger.order} · @{_trigger.amount} EUR", `{"amount": 120, "order": "A-1001"}`, "A-1001 · 120 EUR"},
		{"nested path", "@{_trigger.customer.name}", `{"customer": {"name": "Ada  Lovelace"}}`, "Ada Lovelace"},
		{"template that fails falls back", "@{_trigger.missing}", `{"order": "A-1", "lines": [1, 2], "paid": true, "amount": 3.5, "more": "x"}`, "amount: 3.5 · more: x · order: A-1"},
		{"no template: first scalars by name", "", `{"z": "last", "a": 1}`, "a: 1 · z: last"},
		{"not an object", "", `[1, 2]`, ""},
		{"no scalar", "", `{"items": [1], "meta": {}}`, ""},
		{"empty input", "", `{}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, Summary(c.display, json.RawMessage(c.input)))
		})
	}
	long := Summary("", json.RawMessage(`{"note": "`+strings.Repeat("é", 300)+`"}`))
	require.Len(t, []rune(long), SummaryMaxRunes)
	require.True(t, strings.HasSuffix(long, "…"))
}

func TestDisplayIsCheckedAndReadsOnlyTheInput(t *testing.T) {
	def := func(display string) []byte {
		b, err := json.Marshal(map[string]any{"name": "x", "display": display, "vars": map[string]any{"secret": "s"},
			"nodes": []any{map[string]any{"id": "a", "type": "wait", "data": map[string]any{"for": "1h"}}}})
		require.NoError(t, err)
		return b
	}
	wf, err := Compile(def("@{_trigger.order} · @{ _trigger.amount } EUR"), BuiltinRegistry())
	require.NoError(t, err)
	require.Equal(t, "@{_trigger.order} · @{ _trigger.amount } EUR", wf.Definition().Display)

	for display, want := range map[string]string{
		"@{_vars.secret}":                 "display may read only the input",
		"@{_trigger.a} @{nodes.a.output}": "display may read only the input",
		"@{_execution.id}":                "display may read only the input",
		"@{_trigger.a":                    "",
	} {
		_, err := Compile(def(display), BuiltinRegistry())
		var verr *ValidationError
		require.ErrorAs(t, err, &verr, display)
		require.Equal(t, "display", verr.Errors[0].Path, display)
		require.Contains(t, verr.Errors[0].Message, want, display)
	}
}
