package executor_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// stuckTransport is the network of a pod that dies right after committing: every
// request hangs until its context ends, and is reported on entered.
type stuckTransport struct{ entered chan *http.Request }

func (s stuckTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	s.entered <- r
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// waitDef is a workflow whose single wait_events node makes a correlated call to the
// fake service's /process, with custom id fields and headers.
func (h *harness) waitDef(name string, apiCall obj) obj {
	call := obj{
		"url":                 "@{_vars.svc}/process",
		"body":                obj{"order": "@{_trigger.order}", "meta": obj{"source": "test"}},
		"headers":             obj{"X-Order": "o-@{_trigger.order}"},
		"correlationIdField":  "meta.corr",
		"correlationIdHeader": "X-Corr",
	}
	for k, v := range apiCall {
		call[k] = v
	}
	return h.workflow(name, []obj{node("wait", "wait_events", obj{"apiCall": call})}, nil)
}

// TestOutboxSurvivesCrashBetweenCommitAndSend: pod a commits the wait state and its
// outbox row, then dies while sending. Nothing is lost: once a's lease runs out, pod b
// sends the call, exactly once, rendered from the database with both ids injected.
func TestOutboxSurvivesCrashBetweenCommitAndSend(t *testing.T) {
	t.Parallel()
	stuck := stuckTransport{entered: make(chan *http.Request, 10)}
	h := setup(t, func(c *executor.Config) {
		c.Outbound.WrapTransport = func(http.RoundTripper) http.RoundTripper { return stuck }
		c.ShutdownTimeout = 100 * time.Millisecond // the pod is killed, not drained
	})
	name := h.put(t, h.waitDef("crash", nil))
	stopA := h.run(t)
	id := h.start(t, name, obj{"order": 7})

	select {
	case <-stuck.entered:
	case <-time.After(waitTimeout):
		t.Fatal("pod a never tried to send the correlated call")
	}
	stopA() // the pod dies with the call in flight

	// Everything the call needs was committed before it left.
	v := h.view(t, id)
	require.Equal(t, vocab.ExecWaiting, v.Status, dump(v))
	require.Equal(t, vocab.NodeWaiting, nodeOf(t, v, "wait").Status)
	ws := waitOf(t, v, "wait")
	require.Equal(t, vocab.WaitWaiting, ws.Status)
	require.Equal(t, ws.CorrelationID.String(), output(t, nodeOf(t, v, "wait"))["correlation_id"])
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM outbox WHERE wait_state_id = $1 AND attempt = 1 AND claimed_by = 'a'
		AND visible_at > now() + interval '60 seconds'`, ws.ID), "the outbox row is still held under a's lease")
	require.Zero(t, h.fake.count("/process"))

	// Pod b respects a's lease...
	b := newPod(t, h.pool, config(t, "b"))
	b.run(t)
	stays(t, 300*time.Millisecond, func() bool { return h.fake.count("/process") == 0 }, "b sent during a's lease")

	// ...and sends once it runs out. The lease (> 65 s by validation) is expired by hand.
	require.EqualValues(t, 1, h.exec(t, `UPDATE outbox SET visible_at = now()`))
	eventually(t, func() bool { return h.fake.count("/process") == 1 })
	eventually(t, func() bool { return h.count(t, `SELECT count(*) FROM outbox`) == 0 })
	stays(t, 300*time.Millisecond, func() bool { return h.fake.count("/process") == 1 }, "the call was sent twice")

	req := h.fake.requests("/process")[0]
	corr := ws.CorrelationID.String()
	require.Equal(t, http.MethodPost, req.Method)
	require.Equal(t, corr, req.Header.Get("Idempotency-Key"))
	require.Equal(t, corr, req.Header.Get("X-Corr"))
	require.Equal(t, id.String(), req.Header.Get("X-Execution-Id"))
	require.Equal(t, "o-7", req.Header.Get("X-Order"))
	require.Equal(t, "application/json", req.Header.Get("Content-Type"))
	require.Equal(t, obj{
		"order":        float64(7),
		"execution_id": id.String(),
		"meta":         obj{"source": "test", "corr": corr},
	}, req.Body)

	// The wait is untouched by the crash and still takes its reply.
	require.Equal(t, aggregator.Completed, b.apply(t, id, ws.CorrelationID, aggregator.EventAPIResponse, obj{"ok": true}))
	v = b.waitStatus(t, id, "completed")
	require.Equal(t, "b", errText(waitOf(t, v, "wait").ResumedBy))
}

// TestOutboxRetries covers how a correlated call ends: retried on 5xx/429 with one
// Idempotency-Key; a required call that finally fails fails its wait, node and
// execution; a 4xx fails at once; an optional call's failure leaves the wait waiting.
func TestOutboxRetries(t *testing.T) {
	t.Parallel()
	boom := "boom: " + strings.Repeat("x", 600)
	tests := []struct {
		name     string
		statuses []int // answers in order; the last one repeats
		body     string
		required bool
		// want
		requests   int
		execStatus vocab.ExecutionStatus
		waitStatus vocab.WaitStatus
		errParts   []string // in node, execution and wait errors
	}{
		{name: "5xx twice then accepted", statuses: []int{503, 503, 202}, required: true,
			requests: 3, execStatus: "waiting", waitStatus: "waiting"},
		{name: "429 then accepted", statuses: []int{429, 202}, required: true,
			requests: 2, execStatus: "waiting", waitStatus: "waiting"},
		{name: "required call always 500", statuses: []int{500}, body: boom, required: true,
			requests: 3, execStatus: "failed", waitStatus: "failed",
			errParts: []string{"status 500", "boom: xxxx", "attempt 3 of 3"}},
		{name: "required call 400 fails at once", statuses: []int{400}, body: `{"error":"bad order"}`, required: true,
			requests: 1, execStatus: "failed", waitStatus: "failed",
			errParts: []string{"status 400", `{"error":"bad order"}`, "attempt 1 of 3"}},
		{name: "optional call always 500", statuses: []int{500}, body: "boom", required: false,
			requests: 3, execStatus: "waiting", waitStatus: "waiting"},
		{name: "optional call 400", statuses: []int{400}, body: "nope", required: false,
			requests: 1, execStatus: "waiting", waitStatus: "waiting"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, func(c *executor.Config) { c.OutboxMaxAttempts = 3 })
			h.fake.on("/process", func(n int, _ recorded) reply {
				return reply{status: tc.statuses[min(n, len(tc.statuses))-1], body: tc.body}
			})
			name := h.put(t, h.waitDef("retries", obj{"required": tc.required}))
			h.run(t)
			id := h.start(t, name, obj{"order": 1})

			// The call is settled when its outbox row is gone.
			eventually(t, func() bool {
				return h.fake.count("/process") >= tc.requests && h.count(t, `SELECT count(*) FROM outbox`) == 0
			})
			v := h.waitStatus(t, id, tc.execStatus)
			stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/process") == tc.requests }, "unexpected resend")

			reqs := h.fake.requests("/process")
			require.Len(t, reqs, tc.requests)
			ws := waitOf(t, v, "wait")
			for _, r := range reqs {
				require.Equal(t, ws.CorrelationID.String(), r.Header.Get("Idempotency-Key"), "every attempt carries one key")
				require.Equal(t, reqs[0].Body, r.Body, "every attempt sends the same request")
			}
			require.Equal(t, tc.waitStatus, ws.Status)
			n := nodeOf(t, v, "wait")
			if tc.execStatus == "failed" {
				require.Equal(t, vocab.NodeFailed, n.Status)
				for _, part := range tc.errParts {
					require.Contains(t, errText(n.Error), part)
					require.Contains(t, errText(v.Error), part)
					require.Contains(t, errText(ws.Error), part)
				}
				require.Contains(t, errText(v.Error), "node wait:")
				require.NotNil(t, v.FinishedAt)
				return
			}
			require.Equal(t, vocab.NodeWaiting, n.Status)
			require.Nil(t, ws.Error)
			// The wait goes on: its reply still completes it.
			require.Equal(t, aggregator.Completed, h.apply(t, id, ws.CorrelationID, aggregator.EventAPIResponse, obj{"ok": true}))
			h.waitStatus(t, id, "completed")
		})
	}
}

// TestOutboxErrorBodyIsStorable: the excerpt of an error body lands in text columns
// (last_error, the node's and execution's errors). It must be text PostgreSQL accepts
// whatever the service answered, or the failure could never be recorded and the call
// would be re-sent after every lease.
func TestOutboxErrorBodyIsStorable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body string
		want       []string
	}{
		// The 512-byte cut falls inside a "…" (3 bytes).
		{"cut inside a multi-byte character", "boom" + strings.Repeat("…", 400), []string{"status 500: boom……", "attempt 2 of 2"}},
		{"NUL byte", "boom\x00bang", []string{"status 500: boom", "bang"}},
		{"invalid UTF-8", "boom\xff\xfebang", []string{"status 500: boom", "bang"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, func(c *executor.Config) { c.OutboxMaxAttempts = 2 })
			h.fake.on("/process", func(int, recorded) reply { return reply{status: 500, body: tc.body} })
			name := h.put(t, h.waitDef("errbody", nil))
			h.run(t)
			id := h.start(t, name, obj{"order": 1})

			v := h.waitStatus(t, id, "failed")
			for _, w := range tc.want {
				require.Contains(t, errText(nodeOf(t, v, "wait").Error), w)
			}
			require.Equal(t, vocab.WaitFailed, waitOf(t, v, "wait").Status)
			require.Equal(t, 2, h.fake.count("/process"))
		})
	}
}

// TestOutboxCallForFinishedWaitIsDropped: a call whose wait ended before it left is
// not sent, and its row goes.
func TestOutboxCallForFinishedWaitIsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t) // not running: the test plays the pod step by step
	name := h.put(t, h.waitDef("dropped", nil))
	id := h.start(t, name, obj{"order": 1}) // the wait and its call queued at the start
	ws := waitOf(t, h.view(t, id), "wait")
	// The wait ends (here: cancelled) while its call is still queued.
	require.EqualValues(t, 1, h.exec(t, `UPDATE execution_wait_states SET status = 'cancelled', version = version + 1 WHERE id = $1`, ws.ID))

	items, err := h.ex.ClaimOutbox(ctx, 10)
	require.NoError(t, err)
	require.Len(t, items, 1)
	require.NoError(t, h.ex.SendOutbox(ctx, items[0]))
	require.Zero(t, h.fake.count("/process"))
	require.Zero(t, h.count(t, `SELECT count(*) FROM outbox`))
}

// TestRequiredCallFailedDecidedByStrategy: a required call that finally fails ends the
// wait only when the strategy needs its reply. Under any with a Kafka event still open
// the reply is given up and the Kafka record completes the wait; under custom listing
// api_response the node and the execution fail.
func TestRequiredCallFailedDecidedByStrategy(t *testing.T) {
	t.Parallel()
	def := func(h *harness, strategy string, custom []any) obj {
		data := obj{
			"apiCall":             obj{"url": "@{_vars.svc}/process", "required": true},
			"kafkaEvent":          obj{"topic": "orders"},
			"aggregationStrategy": strategy,
		}
		if custom != nil {
			data["requiredEvents"] = custom
		}
		return h.workflow("callfails", []obj{node("wait", "wait_events", data), node("after", "http", obj{"url": "@{_vars.svc}/after"})},
			[]obj{edge("wait", "after", "")})
	}
	// settled waits for both attempts of the call to be over: the second gives up.
	settled := func(t *testing.T, h *harness) {
		for attempt := int32(1); attempt <= 2; attempt++ {
			a := h.attempts.Wait(t)
			require.Equal(t, attempt, a.Attempt)
			require.NoError(t, a.Err)
		}
		require.Equal(t, 2, h.fake.count("/process"))
		require.Zero(t, h.count(t, `SELECT count(*) FROM outbox`))
	}

	t.Run("any: another event can still satisfy it", func(t *testing.T) {
		t.Parallel()
		h := setup(t, observeOutbox, func(c *executor.Config) { c.OutboxMaxAttempts = 2 })
		h.fake.on("/process", func(int, recorded) reply { return reply{status: 500, body: "down"} })
		name := h.put(t, def(h, "any", nil))
		h.run(t)
		id := h.start(t, name, nil)
		settled(t, h)
		v := h.waitStatus(t, id, "waiting")
		ws := waitOf(t, v, "wait")
		require.Equal(t, vocab.WaitWaiting, ws.Status)
		require.Nil(t, ws.Error)
		require.Equal(t, []string{"api_response"}, ws.TimedOutEvents, "the reply is given up")
		require.Equal(t, []string{"kafka_event"}, ws.MissingEvents)
		require.Equal(t, vocab.NodeWaiting, nodeOf(t, v, "wait").Status)

		require.Equal(t, aggregator.Late, h.apply(t, id, ws.CorrelationID, aggregator.EventAPIResponse, obj{"late": true}))
		require.Equal(t, aggregator.Completed, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"sku": "k-1"}))
		v = h.waitStatus(t, id, "completed")
		out := output(t, nodeOf(t, v, "wait"))
		require.Equal(t, []any{"kafka_event"}, out["arrival_order"])
		require.Equal(t, []any{"api_response"}, out["timed_out_events"])
		require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "after").Status)
	})

	t.Run("custom naming api_response fails", func(t *testing.T) {
		t.Parallel()
		h := setup(t, observeOutbox, func(c *executor.Config) { c.OutboxMaxAttempts = 2 })
		h.fake.on("/process", func(int, recorded) reply { return reply{status: 500, body: "down"} })
		name := h.put(t, def(h, "custom", []any{"api_response"}))
		h.run(t)
		id := h.start(t, name, nil)
		settled(t, h)
		v := h.waitStatus(t, id, "failed")
		require.Equal(t, vocab.NodeFailed, nodeOf(t, v, "wait").Status)
		require.Contains(t, errText(nodeOf(t, v, "wait").Error), "status 500")
		require.Equal(t, vocab.WaitFailed, waitOf(t, v, "wait").Status)
		require.Zero(t, h.fake.count("/after"))
	})
}
