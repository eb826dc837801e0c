package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/examples"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
)

// cliFixture is a service on a schema of its own, the external service its example
// calls, and a folder for definition files.
type cliFixture struct {
	server   string
	external *testkit.FakeService
	taken    int // correlated calls nextCall has handed out
	dir      string
}

func setupCLI(t *testing.T) *cliFixture {
	t.Helper()
	schema := dbtest.NewSchema(t)
	f := &cliFixture{external: testkit.NewFakeService(t), dir: t.TempDir()}
	f.external.On("/notifications", testkit.Always(testkit.Reply{Status: http.StatusOK}))

	// examples/order-approval.json as shipped, but calling the fake service.
	raw, err := examples.Definitions.ReadFile("order-approval.json")
	require.NoError(t, err)
	var def map[string]any
	require.NoError(t, json.Unmarshal(raw, &def))
	def["vars"] = map[string]any{"serviceUrl": f.external.URL, "token": "test-token"}
	raw, err = json.MarshalIndent(def, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "order-approval.json"), raw, 0o600))

	cfg := replica.Config(t, schema.URL, "cli-test")
	cfg.DBMaxConns = 8
	s := replica.Start(t, cfg)
	f.server = "http://" + s.Addr()
	return f
}

func (f *cliFixture) file(name string) string { return filepath.Join(f.dir, name) }

type cliResult struct {
	code           int
	stdout, stderr string
}

// rendezvous runs `rendezvous <args>` against the fixture's service.
func (f *cliFixture) rendezvous(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	args = append([]string{args[0], "--server", f.server}, args[1:]...)
	return runArgs(stdin, args...)
}

func runArgs(stdin string, args ...string) cliResult {
	var stdout, stderr bytes.Buffer
	code := runCLI(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr)
	return cliResult{code, stdout.String(), stderr.String()}
}

// ok runs a command that must succeed and returns its stdout.
func (f *cliFixture) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := f.rendezvous(t, "", args...)
	require.Equal(t, exitOK, r.code, "rendezvous %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.stdout, r.stderr)
	return r.stdout
}

func (f *cliFixture) jsonOut(t *testing.T, v any, args ...string) {
	t.Helper()
	out := f.ok(t, append(args, "-o", "json")...)
	require.NoError(t, json.Unmarshal([]byte(out), v), out)
}

func (f *cliFixture) nextCall(t *testing.T) map[string]any {
	t.Helper()
	f.taken++
	return f.external.AwaitNth(t, 30*time.Second, "/approvals", f.taken).Body
}

// row finds the line of a table whose first cells are key and returns all its cells
// (cells are separated by two spaces or more).
func row(t *testing.T, table string, key ...string) []string {
	t.Helper()
	for line := range strings.SplitSeq(table, "\n") {
		cells := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
		if len(cells) >= len(key) && slices.Equal(cells[:len(key)], key) {
			return cells
		}
	}
	t.Fatalf("no row %q in\n%s", key, table)
	return nil
}

// section is the part of out from the table whose header starts with header to the
// next blank line.
func section(t *testing.T, out, header string) string {
	t.Helper()
	i := strings.Index(out, "\n"+header)
	require.GreaterOrEqual(t, i, 0, "no table %q in\n%s", header, out)
	rest := out[i+1:]
	if j := strings.Index(rest, "\n\n"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// TestCLIWalkthrough tours the operator commands: apply the examples, start executions,
// see what each waits for, let one complete, cancel the others.
func TestCLIWalkthrough(t *testing.T) {
	t.Parallel()
	f := setupCLI(t)
	shipment, err := examples.Definitions.ReadFile("shipment-kafka.json")
	require.NoError(t, err)

	// Apply: created, then unchanged; stdin works as a file.
	out := f.ok(t, "workflows", "apply", "-f", f.file("order-approval.json"))
	require.Equal(t, []string{"NAME", "VERSION", "RESULT"}, row(t, out, "NAME"))
	require.Equal(t, []string{"order-approval", "1", "created"}, row(t, out, "order-approval"))
	r := f.rendezvous(t, string(shipment), "workflows", "apply", "-f", "-")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, []string{"shipment-kafka", "1", "created"}, row(t, r.stdout, "shipment-kafka"))
	require.NoError(t, os.WriteFile(f.file("shipment-kafka.json"), shipment, 0o600))
	out = f.ok(t, "workflows", "apply", "-f", f.file("order-approval.json"), "-f", f.file("shipment-kafka.json"))
	require.Equal(t, []string{"order-approval", "1", "unchanged"}, row(t, out, "order-approval"))
	require.Equal(t, []string{"shipment-kafka", "1", "unchanged"}, row(t, out, "shipment-kafka"))
	var applied []map[string]any
	f.jsonOut(t, &applied, "workflows", "apply", "-f", f.file("shipment-kafka.json"))
	require.Len(t, applied, 1)
	require.Equal(t, "shipment-kafka", applied[0]["name"])
	require.Equal(t, true, applied[0]["unchanged"])
	out = f.ok(t, "workflows", "apply", "--dry-run", "-f", f.file("order-approval.json"))
	require.Equal(t, []string{"order-approval", "valid", "3"}, row(t, out, "order-approval"))

	out = f.ok(t, "workflows", "list")
	require.Equal(t, []string{"NAME", "LATEST", "VERSIONS", "UPDATED"}, row(t, out, "NAME"))
	require.Equal(t, []string{"order-approval", "v1", "1"}, row(t, out, "order-approval")[:3])
	require.Equal(t, []string{"shipment-kafka", "v1", "1"}, row(t, out, "shipment-kafka")[:3])
	out = f.ok(t, "workflows", "get", "order-approval")
	require.Equal(t, []string{"request_approval", "wait_events"}, row(t, out, "request_approval"))
	require.Equal(t, []string{"request_approval", "notify_approved", "output.decision == 'approved'"}, row(t, out, "request_approval", "notify_approved"))
	var wf struct {
		Version    int             `json:"version"`
		Definition json.RawMessage `json:"definition"`
	}
	f.jsonOut(t, &wf, "workflows", "get", "order-approval", "--version", "1")
	require.Equal(t, 1, wf.Version)
	def, err := os.ReadFile(f.file("order-approval.json"))
	require.NoError(t, err)
	require.JSONEq(t, string(def), string(wf.Definition))

	// Start: two orders (one in a table, one as JSON) and a shipment with input from stdin.
	out = f.ok(t, "executions", "start", "order-approval", "--input", `{"order": "A-1", "amount": 120}`)
	require.Equal(t, []string{"ID", "WORKFLOW", "STATUS", "CREATED"}, row(t, out, "ID"))
	approved := uuidRE.FindString(out)
	require.NotEmpty(t, approved, out)
	f.nextCall(t)
	var started struct{ ID, Workflow string }
	f.jsonOut(t, &started, "executions", "start", "order-approval", "--input", `{"order": "A-2", "amount": 80}`)
	require.Equal(t, "order-approval", started.Workflow)
	cancelledWait := started.ID
	f.nextCall(t)
	r = f.rendezvous(t, `{"shipment": "S-1"}`, "executions", "start", "shipment-kafka", "--input", "@-", "-o", "json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &started))
	shipmentExec := started.ID
	require.Eventually(t, func() bool {
		var waits []map[string]any
		f.jsonOut(t, &waits, "waits", "list", "--execution", shipmentExec)
		return len(waits) == 1
	}, 30*time.Second, 50*time.Millisecond, "the shipment's wait is registered")

	// What each waits for.
	out = f.ok(t, "waits", "list", "--status", "waiting")
	require.Equal(t, []string{"EXECUTION", "NODE", "STATUS", "STRATEGY", "ARRIVED", "MISSING", "NEXT DEADLINE", "VERSION"}, row(t, out, "EXECUTION"))
	for exec, want := range map[string]*regexp.Regexp{
		approved:      regexp.MustCompile(`^request_approval waiting all - api_response in [45]m\d\ds \d+$`),
		cancelledWait: regexp.MustCompile(`^request_approval waiting all - api_response in [45]m\d\ds \d+$`),
		shipmentExec:  regexp.MustCompile(`^await_delivery waiting all - kafka_event in (59m\d\ds|1h00m) \d+$`),
	} {
		cells := row(t, out, exec)
		require.Regexp(t, want, strings.Join(cells[1:], " "), out)
	}
	var waits []struct {
		ID            string   `json:"id"`
		ExecutionID   string   `json:"execution_id"`
		NodeID        string   `json:"node_id"`
		MissingEvents []string `json:"missing_events"`
	}
	f.jsonOut(t, &waits, "waits", "list", "--status", "waiting")
	require.Len(t, waits, 3)
	require.Equal(t, []string{approved, cancelledWait, shipmentExec}, []string{waits[0].ExecutionID, waits[1].ExecutionID, waits[2].ExecutionID}, "longest-waiting first")
	require.Equal(t, []string{"kafka_event"}, waits[2].MissingEvents)
	out = f.ok(t, "waits", "list", "-o", "wide", "--workflow", "order-approval")
	require.Equal(t, "ID", row(t, out, "ID")[0])
	require.Equal(t, []string{waits[1].ID, cancelledWait, "order-approval v1", "request_approval", "waiting", "all", "-", "api_response", "-"}, row(t, out, waits[1].ID)[:9])
	r = f.rendezvous(t, "", "waits", "list", "--limit", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 3, "header and two rows:\n%s", r.stdout)
	require.Equal(t, "showing the first 2 waits; more follow (raise --limit, or --limit 0 for all)\n", r.stderr)

	out = f.ok(t, "waits", "get", waits[1].ID)
	require.Regexp(t, `(?m)^Missing:\s+api_response$`, out)
	require.Regexp(t, `(?m)^Arrived:\s+-$`, out)
	require.Regexp(t, `(?m)^Next deadline:\s+in [45]m\d\ds \(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)$`, out)
	require.Regexp(t, `(?m)^Execution:\s+`+cancelledWait+`$`, out)

	// The external service answers the first order: its wait completes, the workflow runs on.
	var first []struct {
		ExecutionID   string `json:"execution_id"`
		CorrelationID string `json:"correlation_id"`
	}
	f.jsonOut(t, &first, "waits", "list", "--execution", approved)
	require.Len(t, first, 1)
	out = f.ok(t, "executions", "list", "--correlation-id", first[0].CorrelationID)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2, "the header and the one execution:\n%s", out)
	require.Equal(t, approved, row(t, out, approved)[0])
	call := map[string]any{"execution_id": first[0].ExecutionID, "correlation_id": first[0].CorrelationID, "decision": "approved"}
	body, _ := json.Marshal(call)
	resp, err := http.Post(f.server+"/api/internal/callbacks/approvals", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Eventually(t, func() bool {
		return regexp.MustCompile(`(?m)^Status:\s+completed$`).MatchString(f.ok(t, "executions", "get", approved))
	}, 30*time.Second, 100*time.Millisecond)
	out = f.ok(t, "executions", "get", approved)
	require.Equal(t, []string{"request_approval", "completed"}, row(t, section(t, out, "NODE"), "request_approval")[:2])
	require.Equal(t, []string{"notify_approved", "completed"}, row(t, out, "notify_approved")[:2])
	require.Equal(t, "skipped", row(t, out, "notify_rejected")[1])
	out = f.ok(t, "waits", "list", "--execution", approved, "--all")
	require.Regexp(t, `^completed all api_response - - \d+$`, strings.Join(row(t, out, approved)[2:], " "))
	// Without --all only open waits are listed: the completed one is not.
	r = f.rendezvous(t, "", "waits", "list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NotContains(t, r.stdout, approved)
	require.Contains(t, r.stdout, cancelledWait)
	require.Contains(t, r.stdout, shipmentExec)
	// waits get takes the execution id, with or without the node.
	out = f.ok(t, "waits", "get", approved)
	require.Regexp(t, `(?m)^Status:\s+completed$`, out)
	require.Regexp(t, `(?m)^ID:\s+`+waits[0].ID+`$`, out)
	// The same wait, read a moment later: only the times relative to now may differ.
	relative := regexp.MustCompile(`\((in [^)]*|[^)]* ago|now)\)`)
	require.Equal(t, relative.ReplaceAllString(out, "(…)"),
		relative.ReplaceAllString(f.ok(t, "waits", "get", approved, "request_approval"), "(…)"))
	r = f.rendezvous(t, "", "waits", "get", approved, "no_such_node")
	require.Equal(t, exitRefused, r.code)
	require.Equal(t, "error: rendezvous waits get: execution "+approved+" has no wait at node \"no_such_node\"\n", r.stderr)
	out = f.ok(t, "waits", "get", waits[0].ID)
	require.Regexp(t, `(?m)^Status:\s+completed$`, out)
	require.Regexp(t, `(?m)^Resumed:\s+\S+ \(.*\) by cli-test$`, out)
	event := row(t, section(t, out, "EVENT"), "api_response")
	require.Equal(t, "callback approvals", event[2])

	// Cancel the second order's wait: the node and the execution fail.
	out = f.ok(t, "waits", "cancel", cancelledWait, "request_approval", "--reason", "order withdrawn")
	require.Regexp(t, `(?m)^Status:\s+failed$`, out)
	require.Equal(t, "failed", row(t, section(t, out, "NODE"), "request_approval")[1])
	require.Equal(t, []string{"request_approval", "cancelled", "all", "-", "api_response", "-"}, row(t, section(t, out, "WAIT"), "request_approval")[:6])
	out = f.ok(t, "waits", "list", "--execution", cancelledWait, "--all")
	require.Equal(t, "cancelled", row(t, out, cancelledWait)[2])
	r = f.rendezvous(t, "", "waits", "cancel", cancelledWait, "request_approval")
	require.Equal(t, exitRefused, r.code)
	require.Regexp(t, `^error: 409 execution-finished: .+\n$`, r.stderr, "the wait ended, and with it the execution")

	// Cancel the shipment execution; again changes nothing; a completed one refuses.
	for range 2 {
		out = f.ok(t, "executions", "cancel", shipmentExec, "--reason", "withdrawn")
		require.Regexp(t, `(?m)^Status:\s+cancelled$`, out)
		require.Equal(t, "cancelled", row(t, section(t, out, "NODE"), "await_delivery")[1])
		require.Equal(t, "cancelled", row(t, section(t, out, "WAIT"), "await_delivery")[1])
	}
	r = f.rendezvous(t, "", "executions", "cancel", approved)
	require.Equal(t, exitRefused, r.code)
	require.Regexp(t, `^error: 409 execution-finished: .+\n$`, r.stderr)

	out = f.ok(t, "executions", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	require.Equal(t, []string{"ID", "WORKFLOW", "STATUS", "CREATED", "ERROR"}, row(t, out, "ID"))
	require.True(t, strings.HasPrefix(lines[1], shipmentExec), "newest first:\n%s", out)
	require.Equal(t, []string{shipmentExec, "shipment-kafka v1", "cancelled"}, row(t, out, shipmentExec)[:3])
	require.Equal(t, "failed", row(t, out, cancelledWait)[2])
	require.Equal(t, "completed", row(t, out, approved)[2])
	var execs []map[string]any
	f.jsonOut(t, &execs, "executions", "list", "--status", "cancelled", "--workflow", "shipment-kafka")
	require.Len(t, execs, 1)
	require.Equal(t, shipmentExec, execs[0]["id"])
	r = f.rendezvous(t, "", "executions", "list", "--status", "running")
	require.Equal(t, exitOK, r.code)
	require.Empty(t, r.stdout)
	require.Equal(t, "no executions found\n", r.stderr)
	f.jsonOut(t, &execs, "executions", "list", "--status", "running")
	require.Empty(t, execs)
	require.NotNil(t, execs, "an empty listing is [], not null")

	var view struct {
		Status string `json:"status"`
		Waits  []struct {
			Status string `json:"status"`
		} `json:"wait_states"`
	}
	f.jsonOut(t, &view, "executions", "get", cancelledWait)
	require.Equal(t, "failed", view.Status)
	require.Equal(t, "cancelled", view.Waits[0].Status)

	// The operator thinks better of it: a redrive opens the wait again. Again is refused.
	out = f.ok(t, "executions", "redrive", cancelledWait)
	require.Regexp(t, `(?m)^Status:\s+waiting$`, out)
	require.Regexp(t, `(?m)^Redrives:\s+1$`, out)
	require.Equal(t, []string{"request_approval", "reopened"}, row(t, section(t, out, "NODE"), "request_approval"))
	out = f.ok(t, "executions", "get", cancelledWait)
	require.Regexp(t, `(?m)^Redrives:\s+1 \(last .+\)$`, out)
	require.Equal(t, "waiting", row(t, section(t, out, "WAIT"), "request_approval")[1])
	r = f.rendezvous(t, "", "executions", "redrive", cancelledWait)
	require.Equal(t, exitRefused, r.code)
	require.Regexp(t, `^error: 409 execution-not-failed: .+\n$`, r.stderr)

	// Nothing else failed: a bulk redrive finds nothing.
	out = f.ok(t, "executions", "redrive-all", "--workflow", "order-approval", "--dry-run")
	require.Equal(t, "0 failed executions match; nothing changed (dry run)\n", out)
	out = f.ok(t, "executions", "redrive-all", "--error", "withdrawn", "--since", "1h")
	require.Equal(t, "redriven 0 (0 in this request, 0 batches; 0 matched)\n", out)
	r = f.rendezvous(t, "", "executions", "redrive-all", "--since", "yesterday")
	require.Equal(t, exitUsage, r.code, r.stderr)

	// Or starts it over with another input: the waiting one is cancelled first.
	out = f.ok(t, "executions", "restart", cancelledWait, "--input", `{"order": "A-9", "amount": 5}`, "--reason", "start over")
	restarted := row(t, out, "ID")
	require.Equal(t, []string{"ID", "WORKFLOW", "STATUS", "CREATED", "RESTARTS", "CANCELLED"}, restarted)
	newID := uuidRE.FindString(out)
	// order-approval starts by waiting, so its restart is parked before the answer.
	require.Equal(t, []string{newID, "order-approval v1", "waiting"}, row(t, out, newID)[:3])
	require.Equal(t, []string{cancelledWait, "true"}, row(t, out, newID)[4:])
	out = f.ok(t, "executions", "get", cancelledWait)
	require.Regexp(t, `(?m)^Status:\s+cancelled$`, out)
	require.Regexp(t, `(?m)^Restarted as:\s+`+newID+`$`, out)
	out = f.ok(t, "executions", "get", newID)
	require.Regexp(t, `(?m)^Restarts:\s+`+cancelledWait+`$`, out)
	r = f.rendezvous(t, "", "executions", "restart", cancelledWait)
	require.Equal(t, exitRefused, r.code)
	require.Regexp(t, `^error: 409 execution-already-restarted: .+\n$`, r.stderr)
}

// TestCLIServerErrors: what the API refuses, one line each on stderr, exit status 1.
func TestCLIServerErrors(t *testing.T) {
	t.Parallel()
	f := setupCLI(t)
	id := uuid.New().String()

	r := f.rendezvous(t, "", "executions", "get", id)
	require.Equal(t, exitRefused, r.code)
	require.Empty(t, r.stdout)
	require.Equal(t, "error: 404 execution-not-found: no execution "+id+"\n", r.stderr)

	r = f.rendezvous(t, "", "waits", "get", id)
	require.Equal(t, exitRefused, r.code)
	require.Regexp(t, `^error: 404 wait-not-found: .+\n$`, r.stderr)

	r = f.rendezvous(t, "", "workflows", "get", "no-such-workflow")
	require.Equal(t, exitRefused, r.code)
	require.Regexp(t, `^error: 404 workflow-not-found: .+\n$`, r.stderr)

	r = f.rendezvous(t, "", "executions", "start", "no-such-workflow")
	require.Equal(t, exitRefused, r.code)
	require.Equal(t, "error: 404 workflow-not-found: no workflow named no-such-workflow\n", r.stderr)

	r = f.rendezvous(t, "", "waits", "list", "--status", "sleeping")
	require.Equal(t, exitRefused, r.code)
	require.Regexp(t, `^error: 400 invalid-query: .+\n$`, r.stderr)

	// An invalid definition: one line for the problem, then one per error with its path.
	bad := `{"name": "bad", "nodes": [{"id": "w", "type": "wait_events", "data": {"timeout": -1}}], "edges": [{"source": "w", "target": "nowhere"}]}`
	require.NoError(t, os.WriteFile(f.file("bad.json"), []byte(bad), 0o600))
	for _, dryRun := range []bool{false, true} {
		args := []string{"workflows", "apply", "-f", f.file("bad.json")}
		if dryRun {
			args = append(args, "--dry-run")
		}
		r = f.rendezvous(t, "", args...)
		require.Equal(t, exitRefused, r.code, r.stderr)
		require.Empty(t, r.stdout)
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		require.Regexp(t, `^error: .*bad\.json: 422 invalid-definition \(\d+ errors?\)$`, lines[0])
		require.Contains(t, lines, `  edges[0].target: unknown node "nowhere"`)
		for _, l := range lines[1:] {
			require.Regexp(t, `^  \S+: \S.*$`, l)
		}
		require.Contains(t, lines[0], fmt.Sprintf("(%d errors)", len(lines)-1))
	}
	// Without a name there is nothing to store under; the server still names every problem.
	r = f.rendezvous(t, `{"nodes": []}`, "workflows", "apply", "-f", "-")
	require.Equal(t, exitRefused, r.code, r.stderr)
	require.Regexp(t, `^error: stdin: 422 invalid-definition`, r.stderr)
	require.Contains(t, r.stderr, "\n  name: required\n")
	r = f.rendezvous(t, "", "workflows", "list")
	require.Equal(t, "no workflows found\n", r.stderr, "nothing was stored")
}

// TestCLIEvents sends events to an execution (buffered, delivered, duplicate, refused)
// and lists the ones that reached no wait.
func TestCLIEvents(t *testing.T) {
	t.Parallel()
	f := setupCLI(t)
	def := `{"name": "approve", "nodes": [{"id": "wait", "type": "wait_events", "data": {
		"events": [{"name": "first", "source": "send", "type": "approved"}, {"name": "second", "source": "send", "type": "approved"}]}}]}`
	require.NoError(t, os.WriteFile(f.file("approve.json"), []byte(def), 0o600))
	f.ok(t, "workflows", "apply", "-f", f.file("approve.json"))
	var started struct{ ID string }
	f.jsonOut(t, &started, "executions", "start", "approve")
	id := started.ID
	require.Eventually(t, func() bool {
		var waits []json.RawMessage
		f.jsonOut(t, &waits, "waits", "list", "--execution", id, "--status", "waiting")
		return len(waits) == 1
	}, 15*time.Second, 20*time.Millisecond)

	// No node waits for "later": buffered, with when it expires.
	out := f.ok(t, "events", "send", id, "later", "--payload", `{"n": 1}`)
	require.Equal(t, []string{"Outcome:", "buffered"}, row(t, out, "Outcome:"))
	require.Len(t, row(t, out, "Buffer ID:"), 2)
	expires, err := time.Parse(time.RFC3339, strings.Fields(row(t, out, "Expires:")[1])[0])
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), expires, time.Minute, "the default eventBufferTtl")

	// The waiting node takes "approved" as its first event, the payload read from stdin;
	// the same id again is a duplicate, another completes the wait.
	r := f.rendezvous(t, `{"by": "alice"}`, "events", "send", id, "approved", "--payload", "@-", "--id", "d-1", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, []string{"Outcome:", "delivered"}, row(t, r.stdout, "Outcome:"))
	require.Equal(t, []string{"NODE", "EVENT", "OUTCOME", "WAIT STATUS", "VERSION", "WAIT"}, row(t, r.stdout, "NODE"))
	cells := row(t, r.stdout, "wait")
	require.Equal(t, []string{"wait", "first", "recorded", "waiting", "2"}, cells[:5])
	require.Regexp(t, uuidRE, cells[5])
	var dup map[string]any
	f.jsonOut(t, &dup, "events", "send", id, "approved", "--payload", `{"by": "alice"}`, "--id", "d-1")
	require.Equal(t, map[string]any{"outcome": "duplicate"}, dup)
	out = f.ok(t, "events", "send", id, "approved")
	require.Equal(t, []string{"wait", "second", "completed", "completed", "3"}, row(t, out, "wait"))
	require.Eventually(t, func() bool {
		var e struct{ Status string }
		f.jsonOut(t, &e, "executions", "get", id)
		return e.Status == "completed"
	}, 15*time.Second, 20*time.Millisecond)

	// Refused: a finished execution, an unknown one (exit status 1).
	r = f.rendezvous(t, "", "events", "send", id, "approved")
	require.Equal(t, exitRefused, r.code)
	require.Empty(t, r.stdout)
	require.Equal(t, "error: 409 execution-finished: execution is already completed; the event was not applied\n", r.stderr)
	unknown := uuid.NewString()
	r = f.rendezvous(t, "", "events", "send", unknown, "approved")
	require.Equal(t, exitRefused, r.code)
	require.Equal(t, "error: 404 execution-not-found: no execution "+unknown+"\n", r.stderr)

	// Each left an unmatched event, newest first: not found, finished, duplicate, buffered.
	out = f.ok(t, "events", "unmatched")
	require.Equal(t, []string{"WHEN", "REASON", "SOURCE", "EVENT", "EXECUTION", "DETAIL"}, row(t, out, "WHEN"))
	var rows [][]string
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		rows = append(rows, regexp.MustCompile(`\s{2,}`).Split(line, -1))
	}
	require.Len(t, rows, 5)
	for i, reason := range []string{"REASON", "no_execution", "execution_finished", "duplicate", "buffered"} {
		require.Equal(t, reason, rows[i][1])
	}
	require.Equal(t, []string{"no_execution", "send", "type approved", unknown, "no execution has this id"}, rows[1][1:])

	var buffered []struct {
		Reason, EventType, PayloadExcerpt string
		ExecutionID                       string `json:"execution_id"`
	}
	f.jsonOut(t, &buffered, "events", "unmatched", "--reason", "buffered")
	require.Len(t, buffered, 1)
	require.Equal(t, id, buffered[0].ExecutionID)
	r = f.rendezvous(t, "", "events", "unmatched", "--limit", "1", "-o", "wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "showing the first 1 unmatched events; more follow (raise --limit, or --limit 0 for all)\n", r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2)
	require.Equal(t, []string{"ID", "CREATED", "REASON", "SOURCE", "EVENT", "EXECUTION", "CORRELATION ID", "DETAIL", "PAYLOAD"},
		regexp.MustCompile(`\s{2,}`).Split(lines[0], -1))
	cells = regexp.MustCompile(`\s{2,}`).Split(lines[1], -1)
	require.Regexp(t, `^\d+$`, cells[0])
	require.Equal(t, []string{"no_execution", "send", "type approved", unknown, "-", "no execution has this id", "null"}, cells[2:])
	r = f.rendezvous(t, "", "events", "unmatched", "--reason", "lost")
	require.Equal(t, exitRefused, r.code)
	require.Regexp(t, `^error: 400 invalid-query: reason: .+\n$`, r.stderr)

	// Replaying the event sent to no execution, into the completed one, does nothing and
	// is refused; it is dismissed instead, once. So is the buffered event the completed
	// execution took to the dead letters.
	r = f.rendezvous(t, "", "events", "replay", "unmatched", cells[0], "--execution", id)
	require.Equal(t, exitRefused, r.code)
	require.Regexp(t, `^error: 409 replay-not-applied: .+execution_finished\n$`, r.stderr)
	out = f.ok(t, "events", "dismiss", "unmatched", cells[0], "--reason", "sent to the wrong id")
	require.Equal(t, "unmatched "+cells[0]+" dismissed\n", out)
	r = f.rendezvous(t, "", "events", "dismiss", "unmatched", cells[0], "--reason", "again")
	require.Equal(t, exitRefused, r.code)
	require.Regexp(t, `^error: 409 event-resolved: .+dismissed\n$`, r.stderr)
	var dead struct {
		Items []struct{ ID int64 } `json:"items"`
	}
	raw, err := http.Get(f.server + "/api/v1/events/dead-letters?execution=" + id)
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(raw.Body).Decode(&dead))
	raw.Body.Close()
	require.Len(t, dead.Items, 1)
	dl := strconv.FormatInt(dead.Items[0].ID, 10)
	r = f.rendezvous(t, "", "events", "replay", "dead-letter", dl)
	require.Equal(t, exitRefused, r.code)
	out = f.ok(t, "events", "dismiss", "dead-letter", dl, "--reason", "nobody waits for later")
	require.Equal(t, "dead-letter "+dl+" dismissed\n", out)
	out = f.ok(t, "events", "dismiss-all", "--execution", id, "--dry-run")
	require.Equal(t, "0 dead letters match; nothing changed (dry run)\n", out, "the one there is dismissed")
	out = f.ok(t, "events", "dismiss-all", "--type", "later", "--since", "1h", "--reason", "cleanup")
	require.Equal(t, "dismissed 0 (0 in this request, 0 batches; 0 matched)\n", out)
	for _, args := range [][]string{{"replay", "letter", "1"}, {"replay", "unmatched", "x"}, {"dismiss", "unmatched", "1"}, {"dismiss-all"}} {
		r = f.rendezvous(t, "", append([]string{"events"}, args...)...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
	}
}

// TestCLIUsage: mistakes on the command line exit 2 before anything is sent.
func TestCLIUsage(t *testing.T) {
	t.Parallel()
	// Nothing listens here: a request sent by mistake would exit 3, not 2.
	closed := "http://" + freePort(t)
	for _, args := range [][]string{
		{"waits"},
		{"waits", "frob"},
		{"waits", "get"},
		{"waits", "get", "a", "b"},
		{"waits", "get", "not-a-uuid"},
		{"waits", "list", "--bogus"},
		{"waits", "list", "-o", "yaml"},
		{"waits", "list", "--limit", "-1"},
		{"waits", "list", "--execution", "nope"},
		{"waits", "cancel", uuid.NewString(), "node", "--then", "maybe"},
		{"executions", "start", "wf", "--input", "{"},
		{"executions", "start", "wf", "--input", "@/no/such/file.json"},
		{"executions", "get", "123"},
		{"workflows", "apply"},
		{"workflows", "apply", "-f", "/no/such/def.json"},
		{"workflows", "get", "x", "--version", "-2"},
		{"workflows", "list", "--timeout", "0s"},
		{"workflows", "list", "--server", "localhost:8080"},
		{"events"},
		{"events", "send", uuid.NewString()},
		{"events", "send", "exec-17", "approved"},
		{"events", "send", uuid.NewString(), "approved", "--payload", "{"},
		{"events", "send", uuid.NewString(), "approved", "--payload", "@/no/such/file.json"},
		{"events", "unmatched", "extra"},
		{"events", "unmatched", "--limit", "-1"},
	} {
		// Right after the group, so that a later --server in args wins.
		args = append([]string{args[0], "--server", closed}, args[1:]...)
		r := runArgs("", args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
		require.Empty(t, r.stdout, "%v", args)
		require.Contains(t, r.stderr, "error: rendezvous ", "%v", args)
		require.Contains(t, r.stderr, "--help\" for help.", "%v", args)
	}
	r := runArgs("", "waits", "get", "--server", closed)
	require.Contains(t, r.stderr, "error: rendezvous waits get: want EXECUTION [NODE] | WAIT-ID, got 0 arguments\n")

	// Help: exit 0, on stdout (it was asked for: `| less` pages it) and nothing on stderr,
	// with examples and the exit statuses.
	for _, g := range cliGroups() {
		r := runArgs("", g.name, "-h")
		require.Equal(t, exitOK, r.code)
		require.Empty(t, r.stderr)
		require.Contains(t, r.stdout, "Usage: rendezvous "+g.name+" <command>")
		require.Contains(t, r.stdout, exitStatusHelp)
		for _, c := range g.commands {
			require.Contains(t, r.stdout, "  "+c.name)
			r := runArgs("", g.name, c.name, "--help")
			require.Equal(t, exitOK, r.code, r.stderr)
			require.Empty(t, r.stderr)
			require.Contains(t, r.stdout, "Usage: rendezvous "+g.name+" "+c.name)
			require.Contains(t, r.stdout, "Examples:\n  rendezvous "+g.name+" "+c.name)
			require.Contains(t, r.stdout, exitStatusHelp)
			require.Contains(t, r.stdout, "-server")
		}
	}

	// Through the top-level dispatch, as the binary runs it.
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, run([]string{"waits", "list", "-h"}, &stdout, &stderr))
	require.Contains(t, stdout.String(), "Usage: rendezvous waits list")
	require.Empty(t, stderr.String())
	stderr.Reset()
	require.Equal(t, exitUsage, run([]string{"executions", "get"}, &stdout, &stderr))
	stdout.Reset()
	require.Equal(t, 0, run([]string{"help"}, &stdout, &stderr))
	for _, g := range []string{"workflows", "executions", "waits"} {
		require.Contains(t, stdout.String(), "  rendezvous "+g+" ")
	}
}

// TestCLIUnavailable: no usable answer exits 3 with one line naming the server.
func TestCLIUnavailable(t *testing.T) {
	t.Parallel()
	closed := "http://" + freePort(t)
	r := runArgs("", "waits", "list", "--server", closed)
	require.Equal(t, exitUnavailable, r.code)
	require.Regexp(t, `^error: cannot reach rendezvous at `+regexp.QuoteMeta(closed)+` \(--server, env RENDEZVOUS_SERVER\): .*connection refused\n$`, r.stderr)

	answer := func(status int, contentType, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", contentType)
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	r = runArgs("", "executions", "get", uuid.NewString(), "--server",
		answer(http.StatusInternalServerError, "application/problem+json", `{"type":"about:blank","title":"Internal Server Error","status":500}`))
	require.Equal(t, exitUnavailable, r.code)
	require.Regexp(t, `^error: 500 Internal Server Error: GET /api/v1/executions/\S+\n$`, r.stderr)

	r = runArgs("", "workflows", "list", "--server", answer(http.StatusServiceUnavailable, "text/plain", "upstream down"))
	require.Equal(t, exitUnavailable, r.code)
	require.Equal(t, "error: 503 Service Unavailable: GET /api/v1/workflows\n", r.stderr)

	srv := answer(http.StatusOK, "text/html", "<html>not rendezvous</html>")
	r = runArgs("", "workflows", "list", "--server", srv)
	require.Equal(t, exitUnavailable, r.code)
	require.Regexp(t, `^error: GET .*/api/v1/workflows.*: 200 answer is not the API's: .* \(is `+regexp.QuoteMeta(srv)+` a rendezvous server\?\)\n$`, r.stderr)

	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(slow.Close)
	r = runArgs("", "workflows", "list", "--server", slow.URL, "--timeout", "100ms")
	require.Equal(t, exitUnavailable, r.code)
	require.Contains(t, r.stderr, "Client.Timeout exceeded")
}

// TestCLIServerFromEnvironment is not parallel: it sets RENDEZVOUS_SERVER.
func TestCLIServerFromEnvironment(t *testing.T) {
	envServer := "http://" + freePort(t)
	t.Setenv("RENDEZVOUS_SERVER", envServer)
	r := runArgs("", "workflows", "list")
	require.Equal(t, exitUnavailable, r.code)
	require.Contains(t, r.stderr, "cannot reach rendezvous at "+envServer+" ")

	flagServer := "http://" + freePort(t)
	for _, args := range [][]string{
		{"workflows", "list", "--server", flagServer},
		{"workflows", "--server", flagServer, "list"},
	} {
		r = runArgs("", args...)
		require.Equal(t, exitUnavailable, r.code)
		require.Contains(t, r.stderr, "cannot reach rendezvous at "+flagServer+" ", "the flag wins over the environment")
	}
}

func TestRelative(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		0:                              "now",
		400 * time.Millisecond:         "now",
		42 * time.Second:               "in 42s",
		4*time.Minute + 12*time.Second: "in 4m12s",
		-(3*time.Hour + 5*time.Minute): "3h05m ago",
		50*time.Hour + 10*time.Minute:  "in 2d02h",
		-61 * time.Second:              "1m01s ago",
	} {
		require.Equal(t, want, relative(now.Add(d), now), d.String())
	}
}

// TestCLINodeWarning: a wait that timed out and continued with partial data shows its
// warning where the node's error would be.
func TestCLINodeWarning(t *testing.T) {
	t.Parallel()
	f := setupCLI(t)
	def := `{"name": "partial", "nodes": [{"id": "wait", "type": "wait_events", "data": {
		"apiCall": {"url": "http://127.0.0.1:1/unreachable", "required": false},
		"timeout": 0.5, "onTimeout": "continue_with_partial"}}]}`
	require.NoError(t, os.WriteFile(f.file("partial.json"), []byte(def), 0o600))
	f.ok(t, "workflows", "apply", "-f", f.file("partial.json"))
	id := uuidRE.FindString(f.ok(t, "executions", "start", "partial"))
	require.NotEmpty(t, id)
	require.Eventually(t, func() bool {
		return regexp.MustCompile(`(?m)^Status:\s+completed$`).MatchString(f.ok(t, "executions", "get", id))
	}, 30*time.Second, 100*time.Millisecond)
	out := f.ok(t, "executions", "get", id)
	cells := row(t, section(t, out, "NODE"), "wait")
	require.Equal(t, "completed", cells[1])
	require.Equal(t, "warning: timed out; continued with partial data, without api_response", cells[len(cells)-1])

	var view struct {
		Nodes []struct {
			ID      string `json:"id"`
			Warning string `json:"warning"`
		} `json:"nodes"`
	}
	f.jsonOut(t, &view, "executions", "get", id)
	require.Len(t, view.Nodes, 1)
	require.Equal(t, "timed out; continued with partial data, without api_response", view.Nodes[0].Warning)
}

// TestCLIWaitFor: --wait-for waits through a wait that does not exist yet (a timer
// scheduled only after the one before it fired) and through an execution still moving,
// fails at once when the status can no longer come, and gives up after --timeout with
// where things stood.
func TestCLIWaitFor(t *testing.T) {
	t.Parallel()
	f := setupCLI(t)
	raw, err := examples.Definitions.ReadFile("follow-up.json")
	require.NoError(t, err)
	var def map[string]any
	require.NoError(t, json.Unmarshal(raw, &def))
	def["vars"] = map[string]any{"serviceUrl": f.external.URL}
	raw, err = json.Marshal(def)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(f.file("follow-up.json"), raw, 0o600))
	f.ok(t, "workflows", "apply", "-f", f.file("follow-up.json"))

	start := func(delay string) string {
		var e struct{ ID string }
		f.jsonOut(t, &e, "executions", "start", "follow-up", "--input", `{"delay": "`+delay+`", "timezone": "Europe/Berlin", "contact": "ann@example.com"}`)
		return e.ID
	}
	id := start("1s")
	// The timer at next_business_morning exists only once cool_off's second has passed.
	out := f.ok(t, "waits", "get", id, "next_business_morning", "--wait-for", "scheduled")
	require.Regexp(t, `(?m)^Node:\s+next_business_morning$`, out)
	require.Regexp(t, `(?m)^Status:\s+scheduled$`, out)

	// Next business morning is hours away: --timeout passes, saying where it stands.
	r := f.rendezvous(t, "", "executions", "get", id, "--wait-for", "completed", "--timeout", "1s")
	require.Equal(t, exitRefused, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Equal(t, "error: rendezvous executions get: gave up after 1s (--timeout): execution "+id+" is waiting, not completed\n", r.stderr)

	f.ok(t, "waits", "cancel", id, "next_business_morning", "--then", "continue", "--reason", "send it now")
	out = f.ok(t, "executions", "get", id, "--wait-for", "completed")
	require.Regexp(t, `(?m)^Status:\s+completed$`, out)
	// The cancelled timer will never be scheduled again: no waiting for --timeout.
	r = f.rendezvous(t, "", "waits", "get", id, "next_business_morning", "--wait-for", "scheduled")
	require.Equal(t, exitRefused, r.code, r.stderr)
	require.Equal(t, "error: rendezvous waits get: the wait at node next_business_morning ended cancelled, not scheduled\n", r.stderr)

	// An execution that ended otherwise is shown, and the command fails.
	other := start("1h")
	f.ok(t, "executions", "cancel", other, "--reason", "not needed")
	r = f.rendezvous(t, "", "executions", "get", other, "--wait-for", "completed")
	require.Equal(t, exitRefused, r.code, r.stderr)
	require.Regexp(t, `(?m)^Status:\s+cancelled$`, r.stdout)
	require.Equal(t, "error: rendezvous executions get: execution "+other+" ended cancelled, not completed\n", r.stderr)

	r = f.rendezvous(t, "", "waits", "get", other, "--wait-for", "sleeping")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `--wait-for: want one of waiting, scheduled, completed, timeout, failed, cancelled, resumed, error, not "sleeping"`)
}

// TestCLIApplyWarnings: apply and apply --dry-run print a definition's warnings on
// stderr, one a line with its path, and keep stdout (and -o json) the server's answers.
func TestCLIApplyWarnings(t *testing.T) {
	t.Parallel()
	f := setupCLI(t)
	def := `{"name": "spelled-out", "nodes": [{"id": "wait", "type": "wait_events", "data": {
	  "kafkaEvent": {"topic": "t"}, "aggregationStrategy": "all", "requiredEvents": ["kafka_event"]}}]}`
	for _, args := range [][]string{{"workflows", "apply", "--dry-run", "-f", "-"}, {"workflows", "apply", "-f", "-"}} {
		r := f.rendezvous(t, def, args...)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Equal(t, `stdin: warning: nodes[0].data.requiredEvents: ignored: only used with aggregationStrategy "custom"; this node's strategy "all" decides what it waits for`+"\n", r.stderr)
		require.NotContains(t, r.stdout, "warning")
	}
}
