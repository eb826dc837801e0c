package workflow

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTriggers: a definition's triggers compile into what the consumer reads, and
// ParseTrigger reads a stored trigger alike.
func TestTriggers(t *testing.T) {
	t.Parallel()
	wf, err := Compile([]byte(`{"name": "triggered", "nodes": [{"id": "a", "type": "wait", "data": {"for": "1s"}}],
	  "triggers": [
	    {"topic": "orders.created", "type": "order.created", "filter": {"region": "eu"},
	     "input": {"orderId": "value.order.id", "whole": "value", "k": "key", "src": "headers.x-source", "at": "offset"},
	     "dedupeKey": "value.order.id"},
	    {"topic": "plain"}
	  ]}`), nil)
	require.NoError(t, err)
	want := []Trigger{
		{Topic: "orders.created", Format: FormatAuto, Type: "order.created", Filter: map[string]any{"region": "eu"},
			Input: map[string]RecordRef{
				"orderId": {Part: RecordValue, Path: "order.id"}, "whole": {Part: RecordValue},
				"k": {Part: RecordKey}, "src": {Part: RecordHeader, Path: "x-source"}, "at": {Part: RecordOffset},
			},
			DedupeKey: &RecordRef{Part: RecordValue, Path: "order.id"}},
		{Topic: "plain", Format: FormatAuto, Filter: nil},
	}
	require.Equal(t, want, wf.Definition().Triggers)

	got, errs := ParseTrigger([]byte(`{"topic": "orders.created", "dedupeKey": "headers.id", "input": {"x": "timestamp"}}`), "t")
	require.Empty(t, errs)
	require.Equal(t, Trigger{Topic: "orders.created", Format: FormatAuto, Input: map[string]RecordRef{"x": {Part: RecordTimestamp}},
		DedupeKey: &RecordRef{Part: RecordHeader, Path: "id"}}, got)
	require.Equal(t, "value.order.id", want[0].DedupeKey.String())
}
