package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestRestartOpenExecution: a waiting execution is restarted with a new input. The old
// one is cancelled first (its wait cancelled: an event for it is late), the new one runs
// the same version with the new input and registers its own wait, and the two are
// linked both ways. A second restart of the old one is refused, naming the new one.
func TestRestartOpenExecution(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	name := h.put(t, h.redriveDef("restart-open", 60))
	h.run(t)
	old := h.start(t, name, obj{"order": 1})
	oldWait := waitOf(t, h.waitStatus(t, old, "waiting"), "wait")
	require.Equal(t, aggregator.Recorded, h.apply(t, old, oldWait.CorrelationID, aggregator.EventKafka, obj{"sku": "k-1"}))
	eventually(t, func() bool { return h.fake.count("/process") == 1 })

	r, err := h.ex.Restart(ctx, old, executor.RestartOptions{Input: json.RawMessage(`{"order": 2}`), Reason: "wrong order"})
	require.NoError(t, err)
	require.True(t, r.Cancelled)
	require.Equal(t, old, r.RestartedFrom)
	require.NotEqual(t, old, r.ID)
	require.Equal(t, name, r.Workflow)
	require.EqualValues(t, 1, r.WorkflowVersion)

	v := h.view(t, old)
	require.Equal(t, vocab.ExecCancelled, v.Status)
	require.Equal(t, "wrong order", errText(v.Error))
	require.Equal(t, vocab.WaitCancelled, waitOf(t, v, "wait").Status)
	require.Equal(t, &r.ID, v.RestartedAs)
	require.Nil(t, v.RestartedFrom)
	h.requireQueuesEmpty(t, old)
	require.Equal(t, aggregator.Late, h.apply(t, old, oldWait.CorrelationID, aggregator.EventAPIResponse, obj{"ok": "old"}))

	nv := h.waitStatus(t, r.ID, "waiting")
	require.Equal(t, &old, nv.RestartedFrom)
	require.JSONEq(t, `{"order": 2}`, string(nv.Input))
	newWait := waitOf(t, nv, "wait")
	require.NotEqual(t, oldWait.CorrelationID, newWait.CorrelationID)
	require.Empty(t, newWait.ReceivedEvents, "the new execution starts from nothing")
	eventually(t, func() bool { return h.fake.count("/process") == 2 })
	require.EqualValues(t, 2, h.fake.requests("/process")[1].Body["order"])
	require.Equal(t, aggregator.Recorded, h.apply(t, r.ID, newWait.CorrelationID, aggregator.EventAPIResponse, obj{"ok": "new"}))
	require.Equal(t, aggregator.Completed, h.apply(t, r.ID, newWait.CorrelationID, aggregator.EventKafka, obj{"sku": "k-2"}))
	h.waitStatus(t, r.ID, "completed")
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/after") == 1 })

	_, err = h.ex.Restart(ctx, old, executor.RestartOptions{})
	var again *executor.AlreadyRestartedError
	require.ErrorAs(t, err, &again)
	require.Equal(t, r.ID, again.As)
	_, err = h.ex.Restart(ctx, uuid.New(), executor.RestartOptions{})
	require.ErrorIs(t, err, executor.ErrExecutionNotFound)
	_, err = h.ex.Restart(ctx, r.ID, executor.RestartOptions{Version: "newest"})
	require.ErrorContains(t, err, "version: must be")
}

// TestRestartVersions: a finished execution restarts the version it ran by default, the
// latest on request; its input is kept, and it stays as it finished.
func TestRestartVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	quick := func(url string) obj {
		return h.workflow("restart-versions", []obj{node("n", "http", obj{"url": url, "method": "POST"})}, nil)
	}
	name := h.put(t, quick("@{_vars.svc}/v1"))
	h.run(t)
	old := h.start(t, name, obj{"k": "v"})
	h.waitStatus(t, old, "completed")
	h.put(t, quick("@{_vars.svc}/v2"))

	same, err := h.ex.Restart(ctx, old, executor.RestartOptions{})
	require.NoError(t, err)
	require.False(t, same.Cancelled)
	require.EqualValues(t, 1, same.WorkflowVersion)
	h.waitStatus(t, same.ID, "completed")
	require.JSONEq(t, `{"k": "v"}`, string(h.view(t, same.ID).Input))
	require.Equal(t, vocab.ExecCompleted, h.view(t, old).Status)

	latest, err := h.ex.Restart(ctx, same.ID, executor.RestartOptions{Version: executor.RestartLatestVersion})
	require.NoError(t, err)
	require.EqualValues(t, 2, latest.WorkflowVersion)
	h.waitStatus(t, latest.ID, "completed")
	require.Equal(t, 2, h.fake.count("/v1"))
	require.Equal(t, 1, h.fake.count("/v2"))
}

// TestRestartConcurrent: eight operators restart one waiting execution at once: one
// restart wins, the others are told which execution restarted it, and exactly one new
// execution exists.
func TestRestartConcurrent(t *testing.T) {
	t.Parallel()
	const operators = 8
	ctx := context.Background()
	h := setup(t)
	name := h.put(t, h.redriveDef("restart-race", 60))
	h.run(t)
	old := h.start(t, name, obj{"order": 1})
	h.waitStatus(t, old, "waiting")

	var mu sync.Mutex
	var won []uuid.UUID
	var told []uuid.UUID
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range operators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := h.ex.Restart(ctx, old, executor.RestartOptions{})
			var again *executor.AlreadyRestartedError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, r.ID)
			case errors.As(err, &again):
				told = append(told, again.As)
			default:
				assertNoError(t, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Len(t, won, 1)
	require.Len(t, told, operators-1)
	for _, as := range told {
		require.Equal(t, won[0], as)
	}
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM executions WHERE restarted_from = $1`, old))
	require.Equal(t, 2, h.count(t, `SELECT count(*) FROM executions`))
	h.waitStatus(t, won[0], "waiting")
	require.Equal(t, vocab.ExecCancelled, h.view(t, old).Status)
}
