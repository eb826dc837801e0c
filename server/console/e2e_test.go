package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
)

// Environment of the browser test.
const (
	// chromiumEnv names a Chrome or Chromium binary to use instead of the one on PATH.
	chromiumEnv = "RENDEZVOUS_CHROMIUM"
	// screenshotDirEnv is where screenshots go; default the test's artifact directory
	// (kept with `go test -artifacts`, else removed with the test). They are artifacts of
	// a run, never part of the repository.
	screenshotDirEnv = "RENDEZVOUS_UI_SCREENSHOT_DIR"
)

// stepTimeout bounds each thing the test waits to see. The console polls every 2 s, so a
// change shows within a few seconds; the margin is for -race on a loaded machine.
const stepTimeout = 30 * time.Second

// chromiumPath finds the browser. Its absence fails the test: the project's test setup
// installs Chromium, and a skipped browser test would pass while testing nothing.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(chromiumEnv); p != "" {
		found, err := exec.LookPath(p)
		require.NoError(t, err, "%s=%s is not an executable", chromiumEnv, p)
		return found
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if found, err := exec.LookPath(name); err == nil {
			return found
		}
	}
	t.Fatalf("the web view's browser test needs Chromium, and neither chromium nor chromium-browser is on PATH. "+
		"Install it with `make deps` or `apt-get install -y chromium` (Debian), or set %s to a Chrome or Chromium binary.", chromiumEnv)
	return ""
}

// newFakeService starts the external service of the wait's apiCall: it accepts the
// correlated call, which the test takes with nextCall and calls back when it chooses,
// and answers the continuation's call with {"ok":true}.
func newFakeService(t *testing.T) (fake *testkit.FakeService, nextCall func(t *testing.T) map[string]any) {
	t.Helper()
	fake = testkit.NewFakeService(t)
	fake.On("/done", testkit.Always(testkit.OK))
	taken := 0
	return fake, func(t *testing.T) map[string]any {
		t.Helper()
		taken++
		return fake.AwaitNth(t, stepTimeout, "/process", taken).Body
	}
}

// startService runs one replica, without authentication, consuming from cluster and
// stops it when the test ends.
func startService(t *testing.T, cluster *kfake.Cluster) *replica.Replica {
	t.Helper()
	// Authentication off: the page's token is sent and not checked (auth_e2e_test.go
	// covers a service that checks it).
	cfg := replica.Config(t, dbtest.NewSchema(t).URL, "ui-e2e")
	cfg.DBMaxConns = 8
	cfg.Executor.PollInterval = 50 * time.Millisecond
	cfg.Kafka = consumer.Config{
		Brokers: cluster.ListenAddrs(), AllowAutoTopicCreation: true,
		TopicRefresh: 200 * time.Millisecond, BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
	}
	return replica.Start(t, cfg)
}

// page is the browser tab showing the view, with what the test watches in it.
type page struct {
	ctx  context.Context
	base string

	mu       sync.Mutex
	problems []string // script errors, CSP violations, failed loads of the page's own files
	foreign  []string // requests to any origin other than the service's
	// authorizations are the Authorization headers of the API requests, in order ("" for
	// none).
	authorizations []string
}

// openBrowser starts headless Chromium (flags for a container run as root) with one tab.
func openBrowser(t *testing.T, ctx context.Context, path, base string) *page {
	t.Helper()
	out := &syncBuffer{}
	// Chromium keeps its shared-memory files (--disable-dev-shm-usage) in TMPDIR and
	// leaves the directories behind; the test's own directory goes with the test.
	tmp := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("headless", "new"),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1440, 900),
		chromedp.CombinedOutput(out),
		chromedp.Env("TMPDIR="+tmp),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		if t.Failed() {
			t.Logf("browser output:\n%s", out.String())
		}
	})
	version, err := chromedp.CallBrowser(tabCtx, browser.GetVersion, cdp.Empty{})
	require.NoError(t, err, "start %s; its output:\n%s", path, out.String())
	t.Logf("browser: %s (%s)", version.Product, path)

	p := &page{ctx: tabCtx, base: base}
	require.NoError(t, chromedp.Listen(tabCtx, p.observe))
	return p
}

// syncBuffer holds the browser's output, which chromedp copies in from its own
// goroutine while the test may read it.
type syncBuffer = testkit.Buffer

// observe runs on chromedp's event loop: it only records.
func (p *page) observe(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		p.problems = append(p.problems, "exception: "+ev.ExceptionDetails.Text+describeException(ev.ExceptionDetails))
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			p.problems = append(p.problems, "console."+string(ev.Type)+": "+strings.Join(args, " "))
		}
	case *cdplog.EventEntryAdded:
		e := ev.Entry
		if e.Level != cdplog.EntryLevelError {
			return
		}
		// Failed API requests are expected while the test blocks the API, and a
		// favicon is not something the view serves; any other failed load (a script or
		// stylesheet of the view) and every CSP violation is a defect.
		if e.Source == cdplog.EntrySourceNetwork && (strings.Contains(e.URL, "/api/") || strings.HasSuffix(e.URL, "/favicon.ico")) {
			return
		}
		// The builder asks before a page with unsaved changes is left; a headless page
		// that no person touched gets no prompt, and the browser says so.
		if e.Source == cdplog.EntrySourceIntervention && strings.Contains(e.Text, "'beforeunload' confirmation panel") {
			return
		}
		p.problems = append(p.problems, fmt.Sprintf("log %s: %s %s", e.Source, e.Text, e.URL))
	case *network.EventRequestWillBeSent:
		// data: URLs are the browser's own (the calendar icon of a date input draws one);
		// they reach no network.
		if !strings.HasPrefix(ev.Request.URL, p.base+"/") && !strings.HasPrefix(ev.Request.URL, "data:") {
			p.foreign = append(p.foreign, ev.Request.URL)
		}
		if strings.HasPrefix(ev.Request.URL, p.base+"/api/") {
			auth, _ := ev.Request.Headers["Authorization"].(string)
			p.authorizations = append(p.authorizations, auth)
		}
	}
}

func describeException(d *runtime.ExceptionDetails) string {
	if d == nil || d.Exception == nil {
		return ""
	}
	return " " + d.Exception.Description
}

// eval runs a script in the page and decodes its value into a T.
func eval[T any](p *page, js string) (T, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](js))
}

// do runs a script in the page for its effect; the script returns true when it found
// what it acts on.
func (p *page) do(t *testing.T, what, js string) {
	t.Helper()
	ok, err := eval[bool](p, js)
	require.NoError(t, err, what)
	require.True(t, ok, "%s: not on the page", what)
}

// await polls the page's state (read by js into a T) until cond holds, and fails with
// the last state seen when it does not within stepTimeout.
func await[T any](t *testing.T, p *page, what, js string, cond func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for {
		v, err := eval[T](p, js)
		if err == nil && cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			raw, _ := json.MarshalIndent(v, "", "  ")
			t.Fatalf("%s: not seen within %s (last error: %v); the page showed:\n%s", what, stepTimeout, err, raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// q quotes a Go string as a JavaScript string literal.
func q(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// click clicks the first element matching a CSS selector (SVG elements have no click(),
// so the event is dispatched).
func (p *page) click(t *testing.T, selector string) {
	t.Helper()
	p.do(t, "click "+selector, fmt.Sprintf(`(() => { const el = document.querySelector(%s); if (!el) return false;
  el.dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true})); return true; })()`, q(selector)))
}

// fill sets an input's value as typing does.
func (p *page) fill(t *testing.T, selector, value string) {
	t.Helper()
	p.do(t, "fill "+selector, fmt.Sprintf(`(() => { const el = document.querySelector(%s); if (!el) return false;
  el.value = %s; el.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`, q(selector), q(value)))
}

// confirm answers the confirmation dialog an action opened, and returns its text.
func (p *page) confirm(t *testing.T) string {
	t.Helper()
	text := await(t, p, "the confirmation dialog", `(() => { const d = document.querySelector('dialog.confirm[open]'); return d ? d.textContent : ''; })()`,
		func(s string) bool { return s != "" })
	p.click(t, "dialog.confirm[open] [data-confirm=yes]")
	return text
}

func (p *page) navigate(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, stepTimeout)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(url))
	require.NoError(t, err)
	// Another fragment of the page loaded is no new response: the console routes it.
	if resp != nil {
		require.Equal(t, int64(http.StatusOK), resp.Status)
	}
}

func (p *page) reload(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, stepTimeout)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, chromedp.Reload()))
}

// screenshot writes the page as it looks into the test's output directory.
func (p *page) screenshot(t *testing.T, name, shows string) {
	t.Helper()
	dir := os.Getenv(screenshotDirEnv)
	if dir == "" {
		dir = t.ArtifactDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 is a lossless PNG
	require.NoError(t, err)
	path := filepath.Join(dir, "console-"+name+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot %s: %s", path, shows)
}

// graphNode, execPage and answer mirror what execPageJS reads from an execution's page.
type graphNode struct {
	State    string `json:"state"`
	Spinning bool   `json:"spinning"`
	// Warning is the text of the node's warning mark, when the mark is visible.
	Warning string `json:"warning"`
}

type answer struct {
	Action  string `json:"action"`
	Outcome string `json:"outcome"`
	Text    string `json:"text"`
}

type execPage struct {
	ID         string               `json:"id"`
	Status     string               `json:"status"`
	Nodes      map[string]graphNode `json:"nodes"`
	Conditions []string             `json:"conditions"`
	Selected   string               `json:"selected"`
	Wait       *struct {
		Status string            `json:"status"`
		Events map[string]string `json:"events"`
		Needs  string            `json:"needs"`
		Text   string            `json:"text"`
	} `json:"wait"`
	Timeline  []string `json:"timeline"`
	Unmatched []string `json:"unmatched"`
	Actions   []string `json:"actions"`
	Answer    *answer  `json:"answer"`
}

// execPageJS reads an execution's page through its data attributes.
const execPageJS = `(() => {
  const $ = (s, r) => (r || document).querySelector(s), $$ = (s, r) => [...(r || document).querySelectorAll(s)];
  const st = $('#execution-status');
  const out = { id: ($('#execution-head .id') || {dataset: {}}).dataset.id || '', status: st ? st.dataset.executionStatus : '',
    nodes: {}, conditions: $$('.graph .edge-label').map((e) => e.dataset.condition),
    selected: ($('.graph .node.selected') || {dataset: {}}).dataset.nodeId || '', wait: null,
    timeline: $$('#timeline li').map((li) => li.dataset.kind + (li.dataset.nodeId ? ':' + li.dataset.nodeId : '')),
    unmatched: $$('#execution-unmatched tr[data-reason]').map((tr) => tr.dataset.reason),
    actions: $$('.action-block').filter((b) => !b.hidden).map((b) => b.dataset.actionBlock), answer: null };
  for (const n of $$('.graph .node')) {
    const mark = $('.node-warning', n);
    const shown = mark && getComputedStyle(mark).visibility === 'visible' && mark.getBoundingClientRect().width > 0;
    out.nodes[n.dataset.nodeId] = { state: n.dataset.nodeState, spinning: n.dataset.spinning === 'true', warning: shown ? $('title', mark).textContent : '' };
  }
  const w = $('#wait');
  if (w) {
    out.wait = { status: w.dataset.waitStatus, events: {}, needs: ($('#wait-needs') || {}).textContent || '', text: w.textContent.replace(/\s+/g, ' ') };
    for (const tr of $$('tr[data-event-name]', w)) out.wait.events[tr.dataset.eventName] = tr.dataset.eventState;
  }
  const a = $('#action-result .action-answer');
  if (a) out.answer = { action: a.dataset.action, outcome: a.dataset.outcome, text: a.textContent.replace(/\s+/g, ' ') };
  return out;
})()`

func awaitExec(t *testing.T, p *page, what string, cond func(execPage) bool) execPage {
	t.Helper()
	return await(t, p, what, execPageJS, cond)
}

// TestConsoleFollowsAndActsOnExecutions is the console end to end, in headless Chromium
// against a real service, PostgreSQL and Kafka-protocol broker. An execution waiting for
// a callback and a Kafka record is found by its correlation id and opened: its graph
// shows the waiting node spinning; the record and then the callback arrive, and the wait
// node turns completed while the timeline grows. On a second workflow an event is sent
// from the page, and a wait is cancelled with continue, taking the branch for cancelled
// waits; a refused action shows its problem. A timer wait is listed with its countdown.
// Every API request carries the session's bearer token; the page loads nothing from
// another origin and logs no error.
func TestConsoleFollowsAndActsOnExecutions(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t) // first: without a browser, fail before setting anything up
	const topic = "ui.e2e.shipments"

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	fake, nextCall := newFakeService(t)
	svc := startService(t, cluster)
	base := "http://" + svc.Addr()

	put := func(def map[string]any) {
		status, body := testkit.DoJSON(t, http.MethodPut, base+"/api/v1/workflows/"+def["name"].(string), def, nil)
		require.Equal(t, http.StatusCreated, status, body)
	}
	start := func(name string) string {
		status, body := testkit.DoJSON(t, http.MethodPost, base+"/api/v1/workflows/"+name+"/executions", map[string]any{"input": map[string]any{"order": 7}}, nil)
		require.Equal(t, http.StatusCreated, status, body)
		return body["id"].(string)
	}
	put(map[string]any{
		"name": "shipment", "vars": map[string]any{"svc": fake.URL},
		"nodes": []any{
			map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
				"apiCall":             map[string]any{"url": "@{_vars.svc}/process"},
				"kafkaEvent":          map[string]any{"topic": topic},
				"aggregationStrategy": "all",
				"timeout":             600,
			}},
			map[string]any{"id": "notify", "type": "http", "data": map[string]any{
				"url": "@{_vars.svc}/done", "method": "POST", "body": map[string]any{"execution_id": "@{_execution.id}"},
			}},
		},
		"edges": []any{map[string]any{"source": "wait", "target": "notify"}},
	})
	put(map[string]any{
		"name": "approval", "vars": map[string]any{"svc": fake.URL},
		"nodes": []any{
			map[string]any{"id": "approval", "type": "wait_events", "data": map[string]any{
				"events": []any{map[string]any{"name": "approval", "source": "send", "type": "approved"}}, "timeout": 600,
			}},
			map[string]any{"id": "approved", "type": "http", "data": map[string]any{"url": "@{_vars.svc}/done", "method": "POST"}},
			map[string]any{"id": "escalate", "type": "http", "data": map[string]any{"url": "@{_vars.svc}/done", "method": "POST"}},
		},
		"edges": []any{
			map[string]any{"source": "approval", "target": "approved", "condition": "output.cancelled != true"},
			map[string]any{"source": "approval", "target": "escalate", "condition": "output.cancelled == true"},
		},
	})
	put(map[string]any{"name": "cool-off", "nodes": []any{map[string]any{"id": "cool_off", "type": "wait", "data": map[string]any{"for": "1h"}}}})
	put(map[string]any{"name": "short", "nodes": []any{map[string]any{"id": "short", "type": "wait_events", "data": map[string]any{
		"events": []any{map[string]any{"name": "nudge", "source": "send", "type": "nudge"}}, "timeout": 1,
	}}}})

	shipment := start("shipment")
	call := nextCall(t)
	require.Equal(t, shipment, call["execution_id"])
	corrID := call["correlation_id"].(string)
	// Another execution of the same workflow, started in the same second: its id shares
	// the first digits, and the search must still find exactly one.
	other := start("shipment")
	nextCall(t)
	sendTo, cancelIn, timer := start("approval"), start("approval"), start("cool-off")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	p := openBrowser(t, ctx, chromium, base)
	// The bare path redirects to the console; the session's token is sent from then on.
	p.navigate(t, base+"/ui")
	require.Equal(t, base+"/ui/", p.location(t))
	p.do(t, "store a token", `(() => { sessionStorage.setItem('rendezvous.token', 'e2e-token'); return true; })()`)
	p.mu.Lock()
	p.authorizations = nil
	p.mu.Unlock()
	p.navigate(t, base+"/ui/#/executions")
	p.reload(t)

	// Found by correlation id: one row, the whole id, which opens its page.
	await(t, p, "the executions listed", `document.querySelectorAll('#executions tbody tr').length`, func(n int) bool { return n == 5 })
	p.fill(t, "#filter-q", corrID)
	p.do(t, "search", `(() => { document.querySelector('form[role=search]').requestSubmit(); return true; })()`)
	rows := await(t, p, "the search answer", `[...document.querySelectorAll('#executions tbody tr')].map((tr) => tr.dataset.executionId + ' ' + tr.textContent)`,
		func(rows []string) bool { return len(rows) == 1 && strings.HasPrefix(rows[0], shipment) })
	require.Contains(t, rows[0], shipment, "the full id is shown")
	require.NotContains(t, rows[0], other)
	require.Contains(t, p.location(t), "q="+corrID, "the search is kept in the address")
	p.click(t, "#executions tbody tr a.id")

	// The graph: the wait node waiting and spinning, the next node not reached yet; the
	// wait's two events missing, with what the strategy still needs.
	v := awaitExec(t, p, "the execution page with its waiting node", func(v execPage) bool {
		return v.ID == shipment && v.Nodes["wait"].Spinning && v.Wait != nil && len(v.Wait.Events) == 2
	})
	require.Equal(t, "waiting", v.Status)
	require.Equal(t, graphNode{State: "waiting_for_events", Spinning: true}, v.Nodes["wait"])
	require.Equal(t, graphNode{State: "pending"}, v.Nodes["notify"])
	require.Equal(t, "wait", v.Selected, "the waiting node is selected first")
	require.Equal(t, map[string]string{"api_response": "missing", "kafka_event": "missing"}, v.Wait.Events)
	require.Equal(t, "all of: api_response, kafka_event", v.Wait.Needs)
	require.Contains(t, v.Wait.Text, corrID)
	require.Regexp(t, `in (9|10)m \d\ds`, v.Wait.Text, "the countdown to the 600 s deadline")
	require.Contains(t, v.Timeline, "wait_started:wait")
	require.ElementsMatch(t, []string{"cancel-execution", "send-event", "cancel-wait-continue", "cancel-wait-fail"}, v.Actions)
	spin, err := eval[string](p, `getComputedStyle(document.querySelector('.graph .node[data-node-id="wait"] .spinner-arc')).animationName`)
	require.NoError(t, err)
	require.Equal(t, "spin", spin, "the waiting node's spinner turns")
	p.screenshot(t, "1-waiting", "the shipment execution found by correlation id: its graph with the wait node amber and spinning, notify blue (pending); the panel lists api_response and kafka_event missing, the countdown and 'all of: …'")

	// The Kafka record arrives: the event turns arrived with its topic, partition and
	// offset, and the timeline records it.
	value, err := json.Marshal(map[string]any{"execution_id": shipment, "correlation_id": corrID, "status": "shipped"})
	require.NoError(t, err)
	pctx, pcancel := context.WithTimeout(ctx, stepTimeout)
	require.NoError(t, prod.ProduceSync(pctx, &kgo.Record{Topic: topic, Value: value}).FirstErr())
	pcancel()
	v = awaitExec(t, p, "the record arrived", func(v execPage) bool { return v.Wait != nil && v.Wait.Events["kafka_event"] == "arrived" })
	require.Equal(t, "missing", v.Wait.Events["api_response"])
	require.Contains(t, v.Wait.Text, "kafka "+topic+" partition 0 offset 0")
	require.Equal(t, "all of: api_response", v.Wait.Needs)
	require.Contains(t, v.Timeline, "event_received:wait")
	require.True(t, v.Nodes["wait"].Spinning)
	before := len(v.Timeline)
	p.screenshot(t, "2-record-arrived", "the Kafka record arrived: kafka_event green with its topic, partition and offset; api_response still missing; the timeline lists the event")

	// The callback completes the wait: the node turns completed and stops spinning, the
	// next node runs, the timeline grows to the finish.
	status, body := testkit.DoJSON(t, http.MethodPost, base+"/api/internal/callbacks/acme",
		map[string]any{"execution_id": shipment, "correlation_id": corrID, "decision": "approved"}, nil)
	require.Equal(t, http.StatusAccepted, status, body)
	v = awaitExec(t, p, "the execution completed", func(v execPage) bool {
		return v.Status == "completed" && v.Nodes["notify"].State == "completed"
	})
	require.Equal(t, graphNode{State: "completed"}, v.Nodes["wait"])
	require.Equal(t, map[string]string{"api_response": "arrived", "kafka_event": "arrived"}, v.Wait.Events)
	require.Contains(t, v.Wait.Text, "callback acme")
	require.Greater(t, len(v.Timeline), before)
	require.Equal(t, "execution_finished", v.Timeline[len(v.Timeline)-1])
	require.Contains(t, v.Timeline, "node_finished:notify")
	require.Empty(t, v.Actions, "nothing to do on a finished execution")
	p.screenshot(t, "3-completed", "both events arrived: wait and notify green, no spinner, no actions; the timeline runs from the start through both events, the wait's end and resume to the finish")

	// A late callback is refused and shows under the execution's unmatched events.
	status, body = testkit.DoJSON(t, http.MethodPost, base+"/api/internal/callbacks/acme",
		map[string]any{"execution_id": shipment, "correlation_id": corrID, "decision": "again"}, nil)
	require.Equal(t, http.StatusConflict, status, body)
	v = awaitExec(t, p, "the late callback listed as unmatched", func(v execPage) bool { return len(v.Unmatched) == 1 })
	require.Equal(t, []string{"late"}, v.Unmatched, "the wait had ended")
	rowButtons, err := eval[[]string](p, `[...document.querySelectorAll('#execution-unmatched tbody button[data-action]')].map((b) => b.dataset.action)`)
	require.NoError(t, err)
	require.Equal(t, []string{"replay-unmatched", "dismiss-unmatched"}, rowButtons, "an unmatched event is replayed or dismissed from the execution's page too")

	// The unmatched events page, filtered by the execution, lists it too.
	p.navigate(t, base+"/ui/#/unmatched?execution="+shipment)
	reasons := await(t, p, "the unmatched events page", `[...document.querySelectorAll('#unmatched tbody tr')].map((tr) => tr.querySelector('[data-reason]').dataset.reason + ' ' + tr.textContent)`,
		func(r []string) bool { return len(r) == 1 })
	require.True(t, strings.HasPrefix(reasons[0], "late "), reasons[0])
	require.Contains(t, reasons[0], "callback acme")
	// Replaying it is refused, the execution having finished: the problem is shown as
	// text, and the row stays as it was, still offering its actions.
	p.click(t, `#unmatched button[data-action="replay-unmatched"]`)
	require.Contains(t, p.confirm(t), "Replay unmatched event")
	replayed := await(t, p, "the replay's answer", `(() => { const a = document.querySelector('#action-result .action-answer'); return a ? a.dataset.outcome + ' ' + a.textContent : ''; })()`,
		func(s string) bool { return s != "" })
	require.True(t, strings.HasPrefix(replayed, "problem Replay: refused"), replayed)
	require.Contains(t, replayed, "Conflict (409)")
	require.Contains(t, replayed, "was not applied to execution "+shipment+": late")
	replayExt, err := eval[map[string]string](p, `Object.fromEntries([...document.querySelectorAll('#action-result .problem-extra dt')].map((dt) => [dt.textContent, dt.nextElementSibling.textContent]))`)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"execution id": shipment, "outcome": "late"}, replayExt, "the problem's extension members")
	still, err := eval[int](p, `document.querySelectorAll('#unmatched tbody tr button[data-action]').length`)
	require.NoError(t, err)
	require.Equal(t, 2, still, "a refused replay leaves the row unresolved, with Replay and Dismiss")
	p.screenshot(t, "3a-replay-refused", "the unmatched events page: replaying the late callback refused, the 409 problem rendered with its execution id and outcome; the row keeps Replay and Dismiss")
	require.NotContains(t, replayed, `"detail"`, "a problem is rendered, not shown as JSON")

	// The executions list pages by the API's cursor, and what finished is listed from the
	// API, so it is there after a reload.
	p.navigate(t, base+"/ui/#/executions?limit=2")
	p.reload(t)
	type listPage struct {
		Page     string   `json:"page"`
		IDs      []string `json:"ids"`
		Next     bool     `json:"next"`
		Finished []string `json:"finished"`
	}
	const listJS = `(() => ({ page: document.querySelector('#executions-result .pager .muted').textContent,
  ids: [...document.querySelectorAll('#executions tbody tr')].map((tr) => tr.dataset.executionId),
  next: !document.querySelector('#executions-result [data-page=next]').disabled,
  finished: [...document.querySelectorAll('#finished tbody tr')].map((tr) => tr.dataset.executionId + ' ' + tr.dataset.status) }))()`
	var seen []string
	for i, want := range []int{2, 2, 1} {
		lp := await(t, p, fmt.Sprintf("page %d of the executions", i+1), listJS, func(lp listPage) bool {
			return lp.Page == fmt.Sprintf("page %d", i+1) && len(lp.IDs) == want && len(lp.Finished) > 0 && !slices.Contains(seen, lp.IDs[0])
		})
		require.Equal(t, i < 2, lp.Next, "page %d: a next page", i+1)
		require.Equal(t, []string{shipment + " completed"}, lp.Finished, "recently finished, from the API")
		seen = append(seen, lp.IDs...)
		if lp.Next {
			p.click(t, "#executions-result [data-page=next]")
		}
	}
	require.ElementsMatch(t, []string{shipment, other, sendTo, cancelIn, timer}, seen, "every execution once")

	// Started after the paging, which counts five executions; its one-second wait has
	// timed out by the time the test opens it.
	timedOut := start("short")
	toRedrive := start("approval")

	// Send an event from the page: the editor refuses a payload that is not JSON, then
	// the event is delivered and the approved branch runs.
	p.navigate(t, base+"/ui/#/executions/"+sendTo)
	v = awaitExec(t, p, "the approval execution", func(v execPage) bool { return v.ID == sendTo && v.Nodes["approval"].Spinning })
	require.ElementsMatch(t, []string{"output.cancelled != true", "output.cancelled == true"}, v.Conditions, "edge conditions as labels")
	p.fill(t, "#send-type", "approved")
	p.fill(t, "#send-payload", `{"decision": `)
	p.click(t, `button[data-action="send-event"]`)
	v = awaitExec(t, p, "the payload refused", func(v execPage) bool { return v.Answer == nil })
	refused, err := eval[string](p, `document.querySelector('#action-result').textContent`)
	require.NoError(t, err)
	require.Contains(t, refused, "The payload is not JSON.")
	p.fill(t, "#send-payload", `{"decision": "yes"}`)
	p.click(t, `button[data-action="send-event"]`)
	require.Contains(t, p.confirm(t), "Send a approved event?")
	v = awaitExec(t, p, "the event delivered", func(v execPage) bool {
		return v.Answer != nil && v.Nodes["approved"].State == "completed" && v.Status == "completed"
	})
	require.Equal(t, answer{Action: "send-event", Outcome: "ok", Text: v.Answer.Text}, *v.Answer)
	require.Contains(t, v.Answer.Text, "Outcome: delivered.")
	require.Contains(t, v.Answer.Text, "approval: taken as approval, completed")
	require.Equal(t, "completed", v.Nodes["approval"].State)
	require.Equal(t, "skipped", v.Nodes["escalate"].State, "the branch for cancelled waits is not taken")
	p.screenshot(t, "4-event-sent", "an approved event sent from the page's editor: the answer says delivered, approval and approved green, escalate skipped (dashed)")

	// Cancel a wait with continue: the branch for cancelled waits runs.
	p.navigate(t, base+"/ui/#/executions/"+cancelIn)
	awaitExec(t, p, "the second approval execution", func(v execPage) bool { return v.ID == cancelIn && v.Nodes["approval"].Spinning })
	p.fill(t, "#cancel-wait-continue-reason", "approved by phone")
	p.click(t, `button[data-action="cancel-wait-continue"]`)
	require.Contains(t, p.confirm(t), "Cancel the wait of node approval?")
	v = awaitExec(t, p, "the cancelled branch taken", func(v execPage) bool {
		return v.Answer != nil && v.Nodes["escalate"].State == "completed" && v.Status == "completed"
	})
	require.Equal(t, "ok", v.Answer.Outcome, v.Answer.Text)
	require.Contains(t, v.Answer.Text, "Wait is cancelled")
	require.Equal(t, "skipped", v.Nodes["approved"].State)
	require.Equal(t, "cancelled", v.Wait.Status)
	require.Contains(t, v.Wait.Text, "approved by phone")
	p.screenshot(t, "5-wait-cancelled", "the approval wait cancelled with continue: the answer, the wait cancelled with its reason, escalate green, approved skipped (dashed)")

	// A refused action shows the API's problem, not JSON. The page cannot read the
	// execution any more (its reads are blocked), so it still shows it waiting when
	// another operator cancels it; the event sent then is refused.
	p.navigate(t, base+"/ui/#/executions/"+timer)
	awaitExec(t, p, "the timer execution", func(v execPage) bool { return v.ID == timer && v.Nodes["cool_off"].Spinning })
	p.block(t, base+"/api/v1/executions/"+timer)
	// An event no node waits for is buffered; the cancel then dead-letters it.
	status, body = testkit.DoJSON(t, http.MethodPost, base+"/api/v1/executions/"+timer+"/events", map[string]any{"type": "reminder", "payload": map[string]any{"n": 1}}, nil)
	require.Equal(t, http.StatusAccepted, status, body)
	require.Equal(t, "buffered", body["outcome"])
	status, body = testkit.DoJSON(t, http.MethodPost, base+"/api/v1/executions/"+timer+"/cancel", map[string]any{"reason": "e2e"}, nil)
	require.Equal(t, http.StatusOK, status, body)
	await(t, p, "the page told the API is out of reach", `document.getElementById('api-status').dataset.state`, func(s string) bool { return s == "error" })
	v = awaitExec(t, p, "the last answer kept", func(v execPage) bool { return v.Status == "waiting" })
	require.Contains(t, v.Actions, "send-event")
	p.fill(t, "#send-type", "approved")
	p.fill(t, "#send-payload", `{}`)
	p.click(t, `button[data-action="send-event"]`)
	p.confirm(t)
	v = awaitExec(t, p, "the problem shown", func(v execPage) bool { return v.Answer != nil && v.Answer.Outcome == "problem" })
	require.Contains(t, v.Answer.Text, "execution is already cancelled; the event was not applied")
	require.Contains(t, v.Answer.Text, "Conflict (409)")
	ext, err := eval[map[string]string](p, `Object.fromEntries([...document.querySelectorAll('#action-result .problem-extra dt')].map((dt) => [dt.textContent, dt.nextElementSibling.textContent]))`)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"execution status": "cancelled"}, ext, "the problem's extension members")
	require.NotContains(t, v.Answer.Text, `"detail"`, "a problem is rendered, not shown as JSON")
	p.block(t)
	await(t, p, "the page told the API is reachable again", `document.getElementById('api-status').dataset.state`, func(s string) bool { return s == "ok" })
	awaitExec(t, p, "the cancel seen once the API is reachable", func(v execPage) bool { return v.Status == "cancelled" && len(v.Actions) == 0 })
	p.screenshot(t, "6-problem", "an event sent to an execution cancelled meanwhile: the 409 problem rendered as its title, detail and execution status; the page then shows the execution cancelled, without actions")

	// The dead letters page shows the buffered event the cancel dead-lettered.
	p.navigate(t, base+"/ui/#/dead-letters?execution="+timer)
	dead := await(t, p, "the dead letter listed", `[...document.querySelectorAll('#dead-letters tbody tr')].map((tr) => tr.textContent)`,
		func(r []string) bool { return len(r) == 1 })
	require.Contains(t, dead[0], "execution finished")
	require.Contains(t, dead[0], "reminder")
	require.Contains(t, dead[0], timer)

	// An operator dismisses the dead letter from its row: without a reason the dialog
	// says so beside the field and stays open, sending nothing; with one, the row is
	// marked dismissed and offers nothing more.
	p.click(t, `#dead-letters button[data-action="dismiss-dead-letter"]`)
	await(t, p, "the dismissal's confirmation", `!!document.querySelector('dialog.confirm[open] #dismiss-dead-letter-reason')`, func(b bool) bool { return b })
	p.click(t, "dialog.confirm[open] [data-confirm=yes]")
	notSent := await(t, p, "the dismissal refused without a reason", `(() => { const e = document.querySelector('dialog.confirm[open] .dialog-error'); return e && !e.hidden ? e.textContent : ''; })()`,
		func(s string) bool { return s != "" })
	require.Contains(t, notSent, "A reason is required")
	above, err := eval[string](p, `document.querySelector('#action-result').textContent`)
	require.NoError(t, err)
	require.Empty(t, above, "nothing was sent, so nothing is answered above the table")
	p.fill(t, "dialog.confirm[open] #dismiss-dead-letter-reason", "reminder no longer needed")
	p.click(t, "dialog.confirm[open] [data-confirm=yes]")
	type deadRow struct {
		Resolution string `json:"resolution"`
		Buttons    int    `json:"buttons"`
		Answer     string `json:"answer"`
	}
	dr := await(t, p, "the dead letter dismissed", `(() => { const tr = document.querySelector('#dead-letters tbody tr'); const a = document.querySelector('#action-result .action-answer');
  return { resolution: tr ? tr.dataset.resolution : '', buttons: tr ? tr.querySelectorAll('button[data-action]').length : -1, answer: a ? a.dataset.outcome + ' ' + a.textContent : '' }; })()`,
		func(r deadRow) bool { return r.Resolution == "dismissed" })
	require.Zero(t, dr.Buttons, "a dismissed dead letter offers no action")
	require.Contains(t, dr.Answer, "ok ")
	require.Contains(t, dr.Answer, "dismissed: reminder no longer needed")
	p.screenshot(t, "7-dead-letter-dismissed", "the dead letters page: the reminder dismissed from its row with a reason, its resolution shown, no action left on it")

	// Recovery: a wait cancelled with fail fails its execution, which then offers redrive
	// and restart; redriven from the page, its wait reopens and the node waits again.
	p.navigate(t, base+"/ui/#/executions/"+toRedrive)
	awaitExec(t, p, "the execution to redrive", func(v execPage) bool { return v.ID == toRedrive && v.Nodes["approval"].Spinning })
	p.fill(t, "#cancel-wait-fail-reason", "wrong approver")
	p.click(t, `button[data-action="cancel-wait-fail"]`)
	require.Contains(t, p.confirm(t), "the node fails, and with it the execution")
	v = awaitExec(t, p, "the execution failed", func(v execPage) bool { return v.Status == "failed" && len(v.Actions) == 2 })
	require.ElementsMatch(t, []string{"redrive", "restart"}, v.Actions)
	require.Equal(t, graphNode{State: "failed"}, v.Nodes["approval"])
	p.screenshot(t, "8-failed", "the approval wait cancelled with fail: node and execution failed, the page offers Redrive and Restart")
	p.click(t, `button[data-action="redrive"]`)
	require.Contains(t, p.confirm(t), "Failed nodes: approval.")
	v = awaitExec(t, p, "the execution redriven", func(v execPage) bool {
		return v.Answer != nil && v.Answer.Action == "redrive" && v.Status == "waiting" && v.Nodes["approval"].State == "waiting_for_events"
	})
	require.Equal(t, "ok", v.Answer.Outcome, v.Answer.Text)
	require.Contains(t, v.Answer.Text, "(redrive 1)")
	require.Contains(t, v.Answer.Text, "approval:")
	require.True(t, v.Nodes["approval"].Spinning, "the reopened wait spins again")
	require.Equal(t, "waiting", v.Wait.Status)
	require.ElementsMatch(t, []string{"cancel-execution", "send-event", "cancel-wait-continue", "cancel-wait-fail"}, v.Actions)
	reason, err := eval[string](p, `document.getElementById('cancel-wait-fail-reason').value`)
	require.NoError(t, err)
	require.Empty(t, reason, "the reason of the cancel done is not left to be sent again")
	redriven, err := eval[string](p, `(document.getElementById('execution-redriven') || {}).textContent || ''`)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(redriven, "1 time, last "), redriven)
	v = awaitExec(t, p, "the redrive in the timeline", func(v execPage) bool {
		return slices.Contains(v.Timeline, "execution_redriven")
	})
	p.screenshot(t, "9-redriven", "the failed execution redriven from the page: the answer lists the node reopened, approval amber and spinning again, the execution waiting with its actions back")

	// A wait whose deadline passed: its event timed out, and the timeline says so.
	p.navigate(t, base+"/ui/#/executions/"+timedOut)
	v = awaitExec(t, p, "the wait timed out", func(v execPage) bool {
		return v.ID == timedOut && v.Wait != nil && v.Wait.Status == "timeout" && v.Status == "failed"
	})
	require.Equal(t, graphNode{State: "failed"}, v.Nodes["short"], "a wait that timed out with nowhere to go fails its node")
	require.Contains(t, v.Wait.Text, "timed out waiting for nudge")
	require.Equal(t, map[string]string{"nudge": "timed_out"}, v.Wait.Events)
	require.False(t, v.Nodes["short"].Spinning)
	require.Contains(t, v.Timeline, "wait_ended:short")
	ended, err := eval[string](p, `document.querySelector('#timeline li[data-kind=wait_ended]').textContent`)
	require.NoError(t, err)
	require.Contains(t, ended, "timed out: nudge")
	p.screenshot(t, "10-timed-out", "a wait whose one-second deadline passed: nudge timed out (red), the node and execution failed without a spinner, the timeline's wait end naming the timed-out event")

	// A timer wait is listed with its countdown.
	timer2 := start("cool-off")
	p.navigate(t, base+"/ui/#/waits")
	type timerRow struct {
		Execution string `json:"execution"`
		Countdown string `json:"countdown"`
		State     string `json:"state"`
	}
	tr := await(t, p, "the timer listed", fmt.Sprintf(`(() => { const tr = document.querySelector('#scheduled tr[data-execution-id=%s]'); if (!tr) return null;
  const c = tr.querySelector('[data-deadline]'); return { execution: tr.dataset.executionId, countdown: c.textContent, state: c.dataset.countdown }; })()`, q(timer2)),
		func(r *timerRow) bool { return r != nil })
	require.Equal(t, "running", tr.State)
	require.Regexp(t, `^in (59m \d\ds|1h 00m)$`, tr.Countdown)
	p.screenshot(t, "11-timer-listed", "the waits page: the cool-off timer under Timers (scheduled) with its countdown to the hour")

	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.problems, "the page logged errors")
	require.Empty(t, p.foreign, "the page loaded something from another origin")
	require.NotEmpty(t, p.authorizations)
	for _, a := range p.authorizations {
		require.Equal(t, "Bearer e2e-token", a, "every API request carries the session's token")
	}
}

// block makes the tab's requests to URLs matching patterns fail (as when the service is
// unreachable from the operator's browser); no patterns lets everything through again.
func (p *page) block(t *testing.T, patterns ...string) {
	t.Helper()
	var list []*network.BlockPattern
	for _, pat := range patterns {
		list = append(list, &network.BlockPattern{URLPattern: pat, Block: true})
	}
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	_, err := chromedp.Call(ctx, network.SetBlockedURLs, network.SetBlockedURLsParams{URLPatterns: list})
	require.NoError(t, err)
}

func (p *page) location(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	return loc
}

// TestConsoleShowsANodeWarning: a wait that times out with continue_with_partial
// completes its node with a warning; the console marks the node in the graph and names
// the warning in the node's panel, and only on that node.
func TestConsoleShowsANodeWarning(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	fake, nextCall := newFakeService(t)
	svc := startService(t, cluster)
	base := "http://" + svc.Addr()

	def := map[string]any{
		"name": "ui-partial", "vars": map[string]any{"svc": fake.URL},
		"nodes": []any{
			map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
				"apiCall": map[string]any{"url": "@{_vars.svc}/process"}, "timeout": 8, "onTimeout": "continue_with_partial",
			}},
			map[string]any{"id": "notify", "type": "http", "data": map[string]any{"url": "@{_vars.svc}/done", "method": "POST"}},
		},
		"edges": []any{map[string]any{"source": "wait", "target": "notify"}},
	}
	status, body := testkit.DoJSON(t, http.MethodPut, base+"/api/v1/workflows/ui-partial", def, nil)
	require.Equal(t, http.StatusCreated, status, body)
	// The browser is started before the execution, whose wait lasts 8 s: a browser that
	// starts slowly beside the package's other browser tests must still see it waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	p := openBrowser(t, ctx, chromium, base)
	status, body = testkit.DoJSON(t, http.MethodPost, base+"/api/v1/workflows/ui-partial/executions", map[string]any{"input": map[string]any{}}, nil)
	require.Equal(t, http.StatusCreated, status, body)
	execID := body["id"].(string)
	nextCall(t)

	p.navigate(t, base+"/ui/#/executions/"+execID)

	v := awaitExec(t, p, "the wait waiting, without a warning", func(v execPage) bool {
		return v.ID == execID && v.Nodes["wait"].State == "waiting_for_events"
	})
	require.Empty(t, v.Nodes["wait"].Warning)
	v = awaitExec(t, p, "the wait timed out and its node completed with a warning", func(v execPage) bool {
		return v.Wait != nil && v.Wait.Status == "timeout" && v.Nodes["wait"].State == "completed" &&
			v.Nodes["notify"].State == "completed" && v.Nodes["wait"].Warning != ""
	})
	require.Equal(t, "warning: timed out; continued with partial data, without api_response", v.Nodes["wait"].Warning)
	require.Empty(t, v.Nodes["notify"].Warning)
	require.Equal(t, "wait", v.Selected)
	panel, err := eval[string](p, `(document.getElementById('node-warning') || {}).textContent || ''`)
	require.NoError(t, err)
	require.Equal(t, "timed out; continued with partial data, without api_response", panel, "the node panel names the warning")
	p.screenshot(t, "warning", "a wait that timed out with continue_with_partial: its node green with an amber warning mark, the panel's Warning line naming the missing api_response; notify green without one")

	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.problems, "the page logged errors")
	require.Empty(t, p.foreign, "the page loaded something from another origin")
}
