package executor_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestHTTPNode covers how an http node ends.
func TestHTTPNode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		data  obj
		reply reply
		// want
		status    string // node and execution
		errParts  []string
		output    obj // compared key by key
		outHeader map[string]string
		request   func(t *testing.T, r recorded)
	}{
		{
			name:     "non-2xx fails the node",
			data:     obj{"url": "@{_vars.svc}/call"},
			reply:    reply{status: 503, body: "overloaded"},
			status:   "failed",
			errParts: []string{"status 503", "overloaded", "/call"},
		},
		{
			name:      "failOnNon2xx false completes with the response",
			data:      obj{"url": "@{_vars.svc}/call", "failOnNon2xx": false},
			reply:     reply{status: 404, body: `{"error":"no such order","id":7}`, header: map[string]string{"X-Trace": "t-1"}},
			status:    "completed",
			output:    obj{"status": float64(404), "body": obj{"error": "no such order", "id": float64(7)}},
			outHeader: map[string]string{"x-trace": "t-1", "content-type": "application/json"},
		},
		{
			// PostgreSQL's jsonb cannot hold U+0000: the output must still be storable.
			name:   "2xx with a NUL byte in a text body",
			data:   obj{"url": "@{_vars.svc}/call"},
			reply:  reply{status: 200, body: "bin\x00ary", header: map[string]string{"Content-Type": "application/octet-stream"}},
			status: "completed",
			output: obj{"status": float64(200), "body": "bin\ufffdary"},
		},
		{
			name:   "2xx with an escaped NUL in a JSON body",
			data:   obj{"url": "@{_vars.svc}/call"},
			reply:  reply{status: 200, body: `{"name":"a\u0000b","list":["\u0000"]}`},
			status: "completed",
			output: obj{"status": float64(200), "body": obj{"name": "a\ufffdb", "list": []any{"\ufffd"}}},
		},
		{
			name:   "text body out and in",
			data:   obj{"url": "@{_vars.svc}/call", "method": "PUT", "body": "plain @{_trigger.word}"},
			reply:  reply{status: 200, body: "fine"},
			status: "completed",
			output: obj{"status": float64(200), "body": "fine"},
			request: func(t *testing.T, r recorded) {
				require.Equal(t, http.MethodPut, r.Method)
				require.Equal(t, "plain hello", string(r.Raw))
				require.Equal(t, "text/plain; charset=utf-8", r.Header.Get("Content-Type"))
			},
		},
		{
			name:   "JSON body with templates",
			data:   obj{"url": "@{_vars.svc}/call", "method": "POST", "body": obj{"w": "@{_trigger.word}", "id": "@{_execution.id}", "n": 3}},
			reply:  reply{status: 201, body: `{"created":true}`},
			status: "completed",
			output: obj{"status": float64(201), "body": obj{"created": true}},
			request: func(t *testing.T, r recorded) {
				require.Equal(t, "hello", r.Body["w"])
				require.Equal(t, float64(3), r.Body["n"])
				require.NotEmpty(t, r.Body["id"])
				require.Equal(t, "application/json", r.Header.Get("Content-Type"))
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t)
			h.fake.on("/call", func(int, recorded) reply { return tc.reply })
			name := h.put(t, h.workflow("http", []obj{node("n", "http", tc.data)}, nil))
			h.run(t)
			id := h.start(t, name, obj{"word": "hello"})
			v := h.waitStatus(t, id, vocab.ExecutionStatus(tc.status))
			n := nodeOf(t, v, "n")
			require.Equal(t, tc.status, string(n.Status))
			require.Equal(t, 1, h.fake.count("/call"), "a node's answer is final: no retry")
			req := h.fake.requests("/call")[0]
			require.Equal(t, id.String()+":n", req.Header.Get("Idempotency-Key"))
			if tc.request != nil {
				tc.request(t, req)
			}
			for _, p := range tc.errParts {
				require.Contains(t, errText(n.Error), p)
				require.Contains(t, errText(v.Error), p)
			}
			if tc.output == nil {
				return
			}
			out := output(t, n)
			for k, want := range tc.output {
				require.Equal(t, want, out[k], k)
			}
			headers := out["headers"].(obj)
			for k, want := range tc.outHeader {
				require.Equal(t, want, headers[k], k)
			}
		})
	}

}

// TestHTTPNodeExactNumbers: an id beyond 2^53 in the input is sent as it is, and the
// response's numbers, 1e400 included, are the node's output as they were sent — not a
// float64's rounding, and not a response that cannot be read.
func TestHTTPNodeExactNumbers(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.fake.on("/call", func(int, recorded) reply {
		return reply{status: 200, body: `{"big": 1e400, "id": 9007199254740993}`}
	})
	name := h.put(t, h.workflow("http", []obj{node("n", "http", obj{
		"url": "@{_vars.svc}/call", "method": "POST", "body": obj{"id": "@{_trigger.id}", "text": "id @{_trigger.id}"},
	})}, nil))
	h.run(t)
	id := h.start(t, name, obj{"id": json.Number("9007199254740993")})
	n := nodeOf(t, h.waitStatus(t, id, "completed"), "n")
	var sent bytes.Buffer
	require.NoError(t, json.Compact(&sent, h.fake.requests("/call")[0].Raw))
	require.Equal(t, `{"id":9007199254740993,"text":"id 9007199254740993"}`, sent.String())

	out, err := jsonnum.Decode(n.Output)
	require.NoError(t, err)
	body := out.(map[string]any)["body"].(map[string]any)
	require.True(t, jsonnum.Equal(json.Number("1e400"), body["big"]), "big: %v", body["big"])
	require.True(t, jsonnum.Equal(json.Number("9007199254740993"), body["id"]), "id: %v", body["id"])
}

// TestHTTPNodeUnreachable: a network error is an attempt that could not be made; it is
// retried up to NodeMaxAttempts, then the node fails naming the attempts.
func TestHTTPNodeUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadURL := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there any more

	h := setup(t)
	name := h.put(t, h.workflow("dead", []obj{node("n", "http", obj{"url": deadURL + "/x"})}, nil))
	h.run(t)
	start := time.Now()
	v := h.waitStatus(t, h.start(t, name, nil), "failed")
	n := nodeOf(t, v, "n")
	require.Contains(t, errText(n.Error), "after 3 attempts")
	require.Contains(t, errText(n.Error), deadURL)
	require.Equal(t, int32(3), n.Attempts)
	// Retries are handed back at once, not left to the (minutes-long) lease.
	require.Less(t, time.Since(start), 15*time.Second)
}

// TestVarOverriddenByEnvironment: RENDEZVOUS_VAR_<NAME> overrides a definition var at
// run time, so a secret never needs to be in the definition. Not parallel: t.Setenv.
func TestVarOverriddenByEnvironment(t *testing.T) {
	t.Setenv("RENDEZVOUS_VAR_EXECUTOR_TEST_TOKEN", "from-env")
	h := setup(t)
	def := h.workflow("env", []obj{
		node("n", "http", obj{"url": "@{_vars.svc}/call", "headers": obj{
			"Authorization": "Bearer @{_vars.executor_test_token}",
			"X-Plain":       "@{_vars.plain}",
		}}),
	}, nil)
	def["vars"].(obj)["executor_test_token"] = "from-definition"
	def["vars"].(obj)["plain"] = "kept"
	name := h.put(t, def)
	h.run(t)
	h.waitStatus(t, h.start(t, name, nil), "completed")
	req := h.fake.requests("/call")[0]
	require.Equal(t, "Bearer from-env", req.Header.Get("Authorization"))
	require.Equal(t, "kept", req.Header.Get("X-Plain"))
}
