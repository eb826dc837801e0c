package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// devProcess is `rendezvous dev` running as a user runs it, on ports of its own.
type devProcess struct {
	server   string // http://127.0.0.1:port
	broker   string // 127.0.0.1:port
	example  string // the stand-in external service, http://127.0.0.1:port
	registry string // the embedded schema registry, http://127.0.0.1:port
	logs     *lockedBuffer
	bin      string
}

var bannerLine = regexp.MustCompile(`(?m)^  (HTTP API and callbacks|Kafka broker \(embedded\)|example service|schema registry) +(\S+)`)

// startDev runs the built binary's dev command against a schema of its own and waits
// for its banner. The example service listens on a free port: dev points the examples
// at it.
func startDev(t *testing.T) *devProcess {
	t.Helper()
	bin := buildBinary(t)
	schema := dbtest.NewSchema(t)
	cmd := exec.Command(bin, "dev", "--database-url", schema.URL, "--http-addr", "127.0.0.1:0",
		"--kafka-port", "0", "--schema-registry-port", "0", "--example-service-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "RENDEZVOUS_LOG_LEVEL=info")
	d := &devProcess{logs: &lockedBuffer{}, bin: bin}
	cmd.Stdout, cmd.Stderr = d.logs, d.logs
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-done:
			if err != nil && !t.Failed() {
				t.Errorf("dev exited with %v after Ctrl-C:\n%s", err, d.logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("dev did not stop 30 s after SIGINT:\n%s", d.logs.String())
		}
	})
	require.Eventually(t, func() bool { return len(bannerLine.FindAllString(d.logs.String(), -1)) == 4 },
		2*time.Minute, 50*time.Millisecond, "dev did not print its banner:\n%s", d.logs.String())
	for _, m := range bannerLine.FindAllStringSubmatch(d.logs.String(), -1) {
		switch m[1] {
		case "HTTP API and callbacks":
			d.server = m[2]
		case "example service":
			d.example = m[2]
		case "schema registry":
			d.registry = m[2]
		default:
			d.broker = m[2]
		}
	}
	return d
}

// cli runs an operator command against the dev process and returns its stdout.
func (d *devProcess) cli(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append(args, "--server", d.server)
	code := run(args, &stdout, &stderr)
	require.Equal(t, 0, code, "rendezvous %s\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	return stdout.String()
}

func (d *devProcess) cliJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := d.cli(t, append(args, "-o", "json")...)
	require.NoError(t, json.Unmarshal([]byte(out), v), out)
}

// start starts an execution and returns its id.
func (d *devProcess) start(t *testing.T, workflow, input string) string {
	t.Helper()
	var e struct{ ID string }
	d.cliJSON(t, &e, "executions", "start", workflow, "--input", input)
	return e.ID
}

type waitView struct {
	ID            string `json:"id"`
	NodeID        string `json:"node_id"`
	Status        string `json:"status"`
	CorrelationID string `json:"correlation_id"`
}

// openWait waits until the execution has an open wait at node and returns it.
func (d *devProcess) openWait(t *testing.T, exec, node string) waitView {
	t.Helper()
	var w []waitView
	require.Eventually(t, func() bool {
		d.cliJSON(t, &w, "waits", "list", "--execution", exec, "--node", node)
		return len(w) == 1
	}, 30*time.Second, 50*time.Millisecond, "no open wait at %s of %s:\n%s", node, exec, d.logs.String())
	return w[0]
}

// completed waits until the execution completed and returns its node statuses.
func (d *devProcess) completed(t *testing.T, exec string) map[string]string {
	t.Helper()
	var e struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Nodes  []struct{ ID, Status string }
	}
	require.Eventually(t, func() bool {
		d.cliJSON(t, &e, "executions", "get", exec)
		return e.Status != "running" && e.Status != "waiting"
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, "completed", e.Status, "execution %s: %s\n%s", exec, e.Error, d.logs.String())
	nodes := map[string]string{}
	for _, n := range e.Nodes {
		nodes[n.ID] = n.Status
	}
	return nodes
}

func (d *devProcess) produce(t *testing.T, topic, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.broker), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr())
}

func (d *devProcess) callback(t *testing.T, service, body string) {
	t.Helper()
	resp, err := http.Post(d.server+"/api/internal/callbacks/"+service, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
}

// TestExamplesRunUnderDev: every example definition that dev loads can be started by
// hand and runs to completion with nothing but what dev provides — its broker, its
// stand-in for the external service, the API and the CLI.
func TestExamplesRunUnderDev(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	files, err := filepath.Glob(filepath.Join(repoRoot, "examples", "*.json"))
	require.NoError(t, err)
	drive := map[string]func(t *testing.T){
		"shipment-kafka": func(t *testing.T) {
			id := d.start(t, "shipment-kafka", `{"shipment": "S-1"}`)
			w := d.openWait(t, id, "await_delivery")
			d.produce(t, "shipments.events", `{"execution_id": "`+id+`", "correlation_id": "`+w.CorrelationID+`", "event_type": "shipment.delivered"}`)
			require.Equal(t, "completed", d.completed(t, id)["await_delivery"])
		},
		"order-approval": func(t *testing.T) {
			id := d.start(t, "order-approval", `{"order": "A-1", "amount": 120}`)
			w := d.openWait(t, id, "request_approval")
			require.Eventually(t, func() bool {
				return strings.Contains(d.logs.String(), "approval requested") && strings.Contains(d.logs.String(), w.CorrelationID)
			}, 30*time.Second, 50*time.Millisecond, "the stand-in got the correlated call")
			d.callback(t, "approvals", `{"execution_id": "`+id+`", "correlation_id": "`+w.CorrelationID+`", "decision": "approved"}`)
			nodes := d.completed(t, id)
			require.Equal(t, "completed", nodes["notify_approved"])
			require.Equal(t, "skipped", nodes["notify_rejected"])
		},
		"expense-approval": func(t *testing.T) {
			id := d.start(t, "expense-approval", `{"expense_id": "E-1"}`)
			d.openWait(t, id, "decision")
			d.cli(t, "events", "send", id, "expense.approved", "--payload", `{"by": "ann"}`)
			d.openWait(t, id, "paid")
			d.produce(t, "payments.settled", `{"expense": {"id": "E-1"}, "amount": 42}`)
			require.Equal(t, "completed", d.completed(t, id)["paid"])
			// Two ended waits: waits get needs the node.
			var stdout, stderr bytes.Buffer
			require.Equal(t, exitUsage, run([]string{"waits", "get", id, "--server", d.server}, &stdout, &stderr))
			require.Contains(t, stderr.String(), "execution "+id+" has 2 waits (nodes decision, paid); name the node: waits get "+id+" NODE")
			require.Regexp(t, `(?m)^Node:\s+decision$`, d.cli(t, "waits", "get", id, "decision"))
		},
		"follow-up": func(t *testing.T) {
			id := d.start(t, "follow-up", `{"delay": "1s", "timezone": "Europe/Berlin", "contact": "ann@example.com"}`)
			d.openWait(t, id, "next_business_morning")
			// No waiting for the next business morning: an operator lets it go on now.
			d.cli(t, "waits", "cancel", id, "next_business_morning", "--then", "continue", "--reason", "send it now")
			require.Equal(t, "completed", d.completed(t, id)["send_reminder"])
			require.Contains(t, d.logs.String(), "notification received")
		},
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			fn, ok := drive[name]
			require.True(t, ok, "examples/%s.json has no drive in this test: add one", name)
			fn(t)
		})
	}
	// As shipped, apart from where the stand-in listens: what dev stored is the file.
	for _, name := range []string{"shipment-kafka", "expense-approval"} {
		out := d.cli(t, "workflows", "apply", "-f", filepath.Join(repoRoot, "examples", name+".json"))
		require.Regexp(t, `(?m)^`+name+` +1 +unchanged$`, out)
	}
}

// TestDemoUsesItsOwnWorkflow: the demo stores its definition under a name of its own,
// so order-approval as dev loaded it keeps its one version.
func TestDemoUsesItsOwnWorkflow(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	cmd := exec.Command("go", "run", "./examples/demo", "-server", d.server, "-listen", freePort(t), "-n", "5")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "stored order-approval-demo")
	list := d.cli(t, "workflows", "list")
	require.Regexp(t, `(?m)^order-approval +v1 +1 `, list)
	require.Regexp(t, `(?m)^order-approval-demo +v1 +1 `, list)
}

// TestAvroRecordUnderDev: dev serves a schema registry beside its broker, and its replica
// reads from it: an Avro record written by kafkajs with @kafkajs/confluent-schema-registry
// (the consumer tests' client), registered in dev's registry, resumes a waiting execution.
func TestAvroRecordUnderDev(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	require.NotEmpty(t, d.registry)
	def := filepath.Join(t.TempDir(), "avro-dev.json")
	require.NoError(t, os.WriteFile(def, []byte(`{"name": "avro-dev", "nodes": [{"id": "wait", "type": "wait_events",
		"data": {"kafkaEvent": {"topic": "dev.payments", "format": "avro", "filter": {"status": "SETTLED"}}}}]}`), 0o600))
	d.cli(t, "workflows", "apply", "-f", def)
	exec1 := d.start(t, "avro-dev", `{}`)
	w := d.openWait(t, exec1, "wait")

	client := filepath.Join(repoRoot, "consumer", "testdata", "schemaclient")
	if _, err := os.Stat(filepath.Join(client, "node_modules")); err != nil {
		npm := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		npm.Dir = client
		out, err := npm.CombinedOutput()
		require.NoError(t, err, "npm ci: %s", out)
	}
	plan, err := json.Marshal(map[string]any{
		"brokers": []string{d.broker}, "registry": d.registry,
		"schemas": []map[string]any{{"subject": "dev.payments-value", "type": "AVRO", "schema": `{"type": "record", "name": "Payment",
			"fields": [{"name": "execution_id", "type": "string"}, {"name": "correlation_id", "type": "string"},
			{"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["PENDING", "SETTLED"]}}]}`}},
		"records": []map[string]any{{"topic": "dev.payments", "subject": "dev.payments-value",
			"value": map[string]any{"execution_id": exec1, "correlation_id": w.CorrelationID, "status": "SETTLED"}}},
	})
	require.NoError(t, err)
	node := exec.Command("node", "produce.mjs")
	node.Dir, node.Stdin = client, bytes.NewReader(plan)
	out, err := node.CombinedOutput()
	require.NoError(t, err, "produce.mjs: %s", out)
	require.Equal(t, "completed", d.completed(t, exec1)["wait"])
}
