package db_test

// During a rolling update the previous release runs on the migrated schema. Releases
// before the jsonb → json migrations (015, 016) sent the wait's JSON columns and the
// node's output as jsonb parameters; PostgreSQL must still take them (its jsonb → json
// cast applies on assignment), and the documents must read back the same.

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

func TestPreviousReleaseWritesJSONColumns(t *testing.T) {
	t.Parallel()
	conn := dbtest.NewPool(t)
	ctx := context.Background()

	waitCols := []string{"required_events", "enabled_events", "expected_events", "output_mapping", "timer",
		"received_events", "timed_out_events", "api_response_data", "kafka_event_data", "event_data"}
	for _, c := range waitCols {
		var typ string
		require.NoError(t, conn.QueryRow(ctx, `SELECT data_type FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = 'execution_wait_states' AND column_name = $1`, c).Scan(&typ))
		require.Equal(t, "json", typ, c)
	}

	doc := map[string]string{
		"required_events":   `["a"]`,
		"enabled_events":    `["a", "b"]`,
		"expected_events":   `[{"name": "a", "source": "callback", "required": true}]`,
		"output_mapping":    `{"x": "a"}`,
		"timer":             `{"for": "4s"}`,
		"received_events":   `[{"name": "a", "data": {"n": 1}}]`,
		"timed_out_events":  `["b"]`,
		"api_response_data": `{"n": 1}`,
		"kafka_event_data":  `{"m": 2}`,
		"event_data":        `{"a": {"n": 1}}`,
	}
	// Parameters typed jsonb, as the previous release's statements declared them.
	_, err := conn.Exec(ctx, `
INSERT INTO workflows (name, version, definition) VALUES ('wf', 1, '{}');
INSERT INTO executions (id, workflow_name, workflow_version, status)
VALUES ('00000000-0000-0000-0000-000000000001', 'wf', 1, 'waiting')`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `
INSERT INTO node_execution_rows (execution_id, node_id, status, output)
VALUES ('00000000-0000-0000-0000-000000000001', 'wait', 'completed', $1::jsonb)`, `{"out": [1, 2]}`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `
INSERT INTO execution_wait_states (id, execution_id, node_id, correlation_id, aggregation_strategy,
    required_events, enabled_events, expected_events, output_mapping, timer, received_events, timed_out_events,
    api_response_data, kafka_event_data, event_data, expires_at, next_deadline_at, wait_type, status)
VALUES ('00000000-0000-0000-0000-00000000000a', '00000000-0000-0000-0000-000000000001', 'wait',
    '00000000-0000-0000-0000-00000000000b', 'all', $1::jsonb, $2::jsonb, $3::jsonb, $4::jsonb, $5::jsonb, $6::jsonb,
    $7::jsonb, $8::jsonb, $9::jsonb, $10::jsonb, now() + interval '1 hour', now() + interval '1 hour', 'events', 'completed')`,
		doc["required_events"], doc["enabled_events"], doc["expected_events"], doc["output_mapping"], doc["timer"],
		doc["received_events"], doc["timed_out_events"], doc["api_response_data"], doc["kafka_event_data"], doc["event_data"])
	require.NoError(t, err)
	// The previous release's redrive wrote expected_events alone, typed jsonb too.
	doc["expected_events"] = `[{"name": "a", "source": "callback", "required": false}]`
	tag, err := conn.Exec(ctx, `UPDATE execution_wait_states SET expected_events = $1::jsonb
		WHERE id = '00000000-0000-0000-0000-00000000000a'`, doc["expected_events"])
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	for _, c := range waitCols {
		var same bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT `+c+`::jsonb = $1::jsonb FROM execution_wait_states`, doc[c]).Scan(&same))
		require.True(t, same, c)
	}
	var same bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT output::jsonb = '{"out": [1, 2]}'::jsonb FROM node_executions`).Scan(&same))
	require.True(t, same, "node output")
}
