package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
)

// TestPatternExamples stores the node configuration and the five configuration examples
// of the integration pattern's document exactly as it writes them (testkit.PatternExamples
// reads them from the document and drops their // comments), and runs each under the
// built binary: the correlated call reaches a service of the test's own, the callback is
// sent with curl and the Kafka record produced with kcat, as a user would, and each
// execution completes with what its strategy waits for. Only the address of the service
// the examples call is changed, to one on 127.0.0.1, as the README test changes ports.
func TestPatternExamples(t *testing.T) {
	t.Parallel()
	examples := testkit.PatternExamples(t)
	require.Len(t, examples, 6, "the node configuration and five examples")
	requireTool(t, "kcat")
	requireTool(t, "curl")
	svc := newCalledService(t)
	d := startDev(t)

	for i, ex := range examples {
		t.Run(fmt.Sprintf("%d %s", i, ex.Heading), func(t *testing.T) {
			raw := string(ex.Node)
			for _, host := range []string{"https://api.example.com", "https://external-service.com"} {
				raw = strings.ReplaceAll(raw, host, svc.URL)
			}
			var node map[string]any
			require.NoError(t, json.Unmarshal([]byte(raw), &node))
			node["id"] = "wait"
			name := fmt.Sprintf("pattern-%d", i)
			// The node configuration's headers read @{_vars.token}: the workflow has one.
			def := map[string]any{"name": name, "vars": map[string]any{"token": "secret-token"}, "nodes": []any{node}}
			status, stored := testkit.DoJSON(t, http.MethodPut, d.server+"/api/v1/workflows/"+name, def, nil)
			require.Equal(t, http.StatusCreated, status, "%v", stored)
			data := node["data"].(map[string]any)
			var paths []string
			for _, w := range stored["warnings"].([]any) {
				paths = append(paths, w.(map[string]any)["path"].(string))
			}
			// The token var is stored as the example writes it, so its name is warned
			// about (a secret is the way to keep it out of the database).
			want := []string{"vars.token"}
			if _, ok := data["requiredEvents"]; ok && data["aggregationStrategy"] != "custom" {
				want = append(want, "nodes[0].data.requiredEvents")
			}
			require.ElementsMatch(t, want, paths)

			id := d.start(t, name, `{"action": "approve", "data": {"amount": 120}}`)
			w := d.openWait(t, id, "wait")
			api, _ := data["apiCall"].(map[string]any)
			kafka, _ := data["kafkaEvent"].(map[string]any)
			// An event object present is enabled unless it says enabled: false.
			apiOn, kafkaOn := api != nil && api["enabled"] != false, kafka != nil && kafka["enabled"] != false

			if apiOn {
				// The call carries both ids in its body and its headers.
				call := svc.awaitCall(t, w.CorrelationID)
				require.Equal(t, id, call.body["execution_id"])
				require.Equal(t, w.CorrelationID, call.body["correlation_id"])
				require.Equal(t, id, call.header.Get("X-Execution-Id"))
				if headers, ok := api["headers"].(map[string]any); ok {
					require.Equal(t, "Bearer secret-token", call.header.Get("Authorization"), "%v", headers)
				}
			}

			// What the strategy waits for: all enabled events, the first for any, the
			// listed ones for custom.
			sendCallback, sendRecord := apiOn, kafkaOn
			switch data["aggregationStrategy"] {
			case "any":
				sendRecord = false
			case "custom":
				required := fmt.Sprint(data["requiredEvents"])
				sendCallback, sendRecord = strings.Contains(required, "api_response"), strings.Contains(required, "kafka_event")
			}
			ids := map[string]any{"execution_id": id, "correlation_id": w.CorrelationID}
			if sendRecord {
				record := map[string]any{"status": "done"}
				for k, v := range ids {
					record[k] = v
				}
				if filter, ok := kafka["filter"].(map[string]any); ok {
					for k, v := range filter {
						record[k] = v
					}
				}
				kcat(t, d.broker, kafka["topic"].(string), record)
			}
			if sendCallback {
				body := map[string]any{"decision": "approved"}
				for k, v := range ids {
					body[k] = v
				}
				curlCallback(t, d.server+"/api/internal/callbacks/external-service", body)
			}

			require.Equal(t, map[string]string{"wait": "completed"}, d.completed(t, id))
			var e struct {
				Nodes []struct {
					ID     string         `json:"id"`
					Output map[string]any `json:"output"`
				} `json:"nodes"`
			}
			d.cliJSON(t, &e, "executions", "get", id)
			out := e.Nodes[0].Output
			if apiOn {
				if sendCallback {
					require.Equal(t, "approved", out["apiResponse"].(map[string]any)["decision"], "%v", out)
				} else {
					require.Nil(t, out["apiResponse"], "%v", out)
				}
			}
			if kafkaOn {
				if sendRecord {
					require.Equal(t, "done", out["kafkaEvent"].(map[string]any)["status"], "%v", out)
				} else {
					require.Nil(t, out["kafkaEvent"], "%v", out)
				}
			}
		})
	}
}

// curlCallback posts body to url with curl and requires 202.
func curlCallback(t *testing.T, url string, body map[string]any) {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	out, err := exec.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
		"-H", "Content-Type: application/json", "--data-binary", string(raw), url).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "202", string(out), "curl %s", url)
}

// kcat produces one record with kcat.
func kcat(t *testing.T, broker, topic string, value map[string]any) {
	t.Helper()
	raw, err := json.Marshal(value)
	require.NoError(t, err)
	cmd := exec.Command("kcat", "-P", "-b", broker, "-t", topic)
	cmd.Stdin = strings.NewReader(string(raw) + "\n")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "kcat: %s", out)
}

// calledService stands in for the service the examples call: it answers 202 and keeps
// each request by the correlation id in its header.
type calledService struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]receivedCall
	ready chan struct{}
}

type receivedCall struct {
	header http.Header
	body   map[string]any
}

func newCalledService(t *testing.T) *calledService {
	t.Helper()
	s := &calledService{calls: map[string]receivedCall{}, ready: make(chan struct{}, 16)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		s.mu.Lock()
		s.calls[r.Header.Get("X-Correlation-Id")] = receivedCall{header: r.Header.Clone(), body: body}
		s.mu.Unlock()
		select {
		case s.ready <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(s.Close)
	return s
}

// awaitCall waits for the call of the wait with this correlation id.
func (s *calledService) awaitCall(t *testing.T, correlationID string) receivedCall {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		s.mu.Lock()
		c, ok := s.calls[correlationID]
		s.mu.Unlock()
		if ok {
			return c
		}
		select {
		case <-s.ready:
		case <-deadline:
			t.Fatalf("no call for correlation id %s", correlationID)
		}
	}
}
