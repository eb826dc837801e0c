package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/rendezvous-run/rendezvous/workflow/template"
)

// Summaries: an execution is told apart from the others of its workflow by a short text
// drawn from its input, its business key. The definition's display template says how
// (`"@{_trigger.order} · @{_trigger.amount} EUR"`); without one, the input's first
// scalar fields (by name) name it.
const (
	// SummaryMaxRunes bounds a summary: it is a label in a list, not the input.
	SummaryMaxRunes = 120
	// summaryFields is how many of the input's scalar fields a summary without a display
	// template shows.
	summaryFields = 3
)

// checkDisplay refuses a display template that does not parse or that reads anything
// but the input: a summary is shown to every reader of the lists, so it may not render
// vars (which an environment variable may override with a secret) or node outputs.
func checkDisplay(s string) error {
	if err := template.Check(s); err != nil {
		return err
	}
	for rest := s; ; {
		i := strings.Index(rest, "@{")
		if i < 0 {
			return nil
		}
		rest = rest[i+2:]
		end := strings.IndexAny(rest, ".[}")
		if end < 0 {
			return nil // Check has refused an unclosed placeholder
		}
		if root := strings.TrimSpace(rest[:end]); root != template.RootTrigger {
			return fmt.Errorf("display may read only the input (@{%s...}), not @{%s...}", template.RootTrigger, root)
		}
	}
}

// Summary is the business key of an execution whose input is input, by the definition's
// display template when it has one and it renders, else by the input's first scalar
// fields by name ("amount: 120 · order: A-1001"); empty when neither gives any
// text. It is at most SummaryMaxRunes long.
func Summary(display string, input json.RawMessage) string {
	out := ""
	if display != "" {
		var in any
		if json.Unmarshal(input, &in) == nil {
			noEnv := func(string) (string, bool) { return "", false }
			if s, err := template.RenderString(display, template.Scope{Trigger: in, LookupEnv: noEnv}); err == nil {
				out = s
			}
		}
	}
	if out == "" {
		out = firstScalars(input)
	}
	out = strings.Join(strings.Fields(out), " ")
	if utf8.RuneCountInString(out) > SummaryMaxRunes {
		r := []rune(out)
		out = string(r[:SummaryMaxRunes-1]) + "…"
	}
	return out
}

// firstScalars names the first scalar fields of a JSON object by name: the stored input
// (jsonb) keeps no document order, so the order is the names'.
func firstScalars(input json.RawMessage) string {
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	if dec.Decode(&obj) != nil {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if len(parts) == summaryFields {
			break
		}
		switch v := obj[k].(type) {
		case string:
			parts = append(parts, k+": "+v)
		case json.Number, bool:
			parts = append(parts, fmt.Sprintf("%s: %v", k, v))
		}
	}
	return strings.Join(parts, " · ")
}
