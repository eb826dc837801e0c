package executor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  executor.Config
		want string
	}{
		{"instance id required", executor.Config{}, "executor.instance_id"},
		{"lease must exceed the longest http node", executor.Config{InstanceID: "a", Lease: time.Minute}, "executor.lease"},
		{"outbox timeout below lease", executor.Config{InstanceID: "a", OutboxTimeout: executor.LeaseDefault}, "executor.outbox_timeout"},
		{"defaults are valid", executor.Config{InstanceID: "a"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := executor.New(nil, aggregator.Config{}, tc.cfg)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestPutWorkflowAndStart(t *testing.T) {
	t.Parallel()
	h := setup(t)
	ctx := context.Background()
	def := func(url string) []byte {
		raw, err := json.Marshal(obj{"name": "wf", "nodes": []obj{node("n", "http", obj{"url": url})}})
		require.NoError(t, err)
		return raw
	}

	s, err := h.ex.PutWorkflow(ctx, "wf", def("http://a.example/x"))
	require.NoError(t, err)
	require.Equal(t, executor.StoredWorkflow{Name: "wf", Version: 1, CreatedAt: s.CreatedAt, Created: true, Warnings: []workflow.FieldError{}}, s)

	// Equal up to formatting: the latest version is kept.
	s, err = h.ex.PutWorkflow(ctx, "wf", []byte(`{"nodes":[{"data":{"url":"http://a.example/x"},"type":"http","id":"n"}],  "name":"wf"}`))
	require.NoError(t, err)
	require.True(t, s.Unchanged)
	require.EqualValues(t, 1, s.Version)

	s, err = h.ex.PutWorkflow(ctx, "wf", def("http://b.example/x"))
	require.NoError(t, err)
	require.EqualValues(t, 2, s.Version)
	require.False(t, s.Created)

	_, err = h.ex.PutWorkflow(ctx, "other", def("http://b.example/x"))
	var ve *workflow.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "name", ve.Errors[0].Path)

	_, err = h.ex.PutWorkflow(ctx, "wf", []byte(`{"name":"wf","nodes":[{"id":"n","type":"nope"}]}`))
	require.ErrorAs(t, err, &ve)

	st, err := h.ex.StartExecution(ctx, "wf", nil)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.WorkflowVersion)
	require.Equal(t, vocab.ExecRunning, st.Status)
	v := h.view(t, st.ID)
	require.JSONEq(t, `{}`, string(v.Input))
	require.Equal(t, vocab.NodeRunning, nodeOf(t, v, "n").Status, "a queued root shows as running")
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue WHERE execution_id = $1 AND node_id = 'n' AND kind = 'run'`, st.ID))

	// Numbers compare by exact value: 3e1 comes back from jsonb as 30 and is unchanged;
	// an id a float64 cannot tell from the stored one is a new version.
	nums := func(id string) []byte {
		raw, err := json.Marshal(obj{"name": "nums", "nodes": []obj{node("n", "http", obj{
			"url": "http://a.example/x", "timeout": json.Number("3e1"), "body": obj{"id": json.Number(id)},
		})}})
		require.NoError(t, err)
		return raw
	}
	s, err = h.ex.PutWorkflow(ctx, "nums", nums("9007199254740993"))
	require.NoError(t, err)
	require.True(t, s.Created)
	s, err = h.ex.PutWorkflow(ctx, "nums", nums("9007199254740993"))
	require.NoError(t, err)
	require.True(t, s.Unchanged, "the same definition, with 3e1 stored as 30")
	s, err = h.ex.PutWorkflow(ctx, "nums", nums("9007199254740992"))
	require.NoError(t, err)
	require.False(t, s.Unchanged)
	require.EqualValues(t, 2, s.Version)

	_, err = h.ex.StartExecution(ctx, "missing", nil)
	require.ErrorIs(t, err, executor.ErrWorkflowNotFound)
	_, err = readmodel.New(h.pool).Execution(ctx, uuid.New())
	require.ErrorIs(t, err, readmodel.ErrNotFound)
}
