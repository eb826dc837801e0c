package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/internal/auth"
	"github.com/rendezvous-run/rendezvous/internal/dbtest"
	"github.com/rendezvous-run/rendezvous/internal/service"
)

// Environment of the browser test.
const (
	// chromiumEnv names a Chrome or Chromium binary to use instead of the one on PATH.
	chromiumEnv = "RENDEZVOUS_CHROMIUM"
	// screenshotDirEnv is where screenshots go; default os.TempDir(). They are artifacts
	// of a run, never part of the repository.
	screenshotDirEnv = "RENDEZVOUS_UI_SCREENSHOT_DIR"
)

// stepTimeout bounds each thing the test waits to see. The page polls every 2 s, so a
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

// fakeService plays the external service of the wait's apiCall: it accepts the
// correlated call and hands it to the test, which calls back when it chooses.
type fakeService struct {
	url   string
	calls chan map[string]any
}

func newFakeService(t *testing.T) *fakeService {
	t.Helper()
	f := &fakeService{calls: make(chan map[string]any, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /process", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.calls <- body
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("POST /done", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fakeService) nextCall(t *testing.T) map[string]any {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(stepTimeout):
		t.Fatal("the correlated call never reached the external service")
		return nil
	}
}

// startService runs one replica consuming from cluster and stops it when the test ends.
func startService(t *testing.T, cluster *kfake.Cluster) *service.Service {
	t.Helper()
	schema := dbtest.NewSchema(t)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := service.New(ctx, service.Config{
		// Authentication is tested in internal/service; here it would only be in the way.
		Auth:        auth.Config{Insecure: true},
		DatabaseURL: schema.URL, HTTPAddr: "127.0.0.1:0", InstanceID: "ui-e2e", AutoMigrate: true, DBMaxConns: 8,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Executor: executor.Config{PollInterval: 50 * time.Millisecond},
		Kafka: consumer.Config{
			Brokers: cluster.ListenAddrs(), AllowAutoTopicCreation: true,
			TopicRefresh: 200 * time.Millisecond, BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		},
	})
	if err != nil {
		cancel()
		require.NoError(t, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil {
			t.Errorf("service: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func doJSON(t *testing.T, method, url string, body any) (int, map[string]any) {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &out), "%s %s answered %d: %s", method, url, resp.StatusCode, data)
	return resp.StatusCode, out
}

// page is the browser tab showing the view, with what the test watches in it.
type page struct {
	ctx  context.Context
	base string

	mu       sync.Mutex
	problems []string // script errors, CSP violations, failed loads of the page's own files
	foreign  []string // requests to any origin other than the service's
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
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(b)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

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
		p.problems = append(p.problems, fmt.Sprintf("log %s: %s %s", e.Source, e.Text, e.URL))
	case *network.EventRequestWillBeSent:
		if !strings.HasPrefix(ev.Request.URL, p.base+"/") {
			p.foreign = append(p.foreign, ev.Request.URL)
		}
	}
}

func describeException(d *runtime.ExceptionDetails) string {
	if d == nil || d.Exception == nil {
		return ""
	}
	return " " + d.Exception.Description
}

// chip, countdown, row and view mirror what snapshotJS reads from the page.
type chip struct {
	State string `json:"state"`
	Text  string `json:"text"`
}

type countdown struct {
	State       string `json:"state"`
	Text        string `json:"text"`
	SecondsLeft int    `json:"secondsLeft"`
}

type row struct {
	Table           string            `json:"table"`
	WaitStatus      string            `json:"waitStatus"`
	ExecutionID     string            `json:"executionId"`
	Workflow        string            `json:"workflow"`
	Node            string            `json:"node"`
	Version         string            `json:"version"`
	ExecutionStatus string            `json:"executionStatus"`
	Events          map[string]chip   `json:"events"`
	Nodes           map[string]string `json:"nodes"`
	Warnings        map[string]string `json:"warnings"` // node id → its warning, as shown
	Countdown       *countdown        `json:"countdown"`
	Text            string            `json:"text"`
}

type view struct {
	API          string `json:"api"`
	APIText      string `json:"apiText"`
	Stale        bool   `json:"stale"`
	WaitingEmpty bool   `json:"waitingEmpty"`
	SummaryWaits string `json:"summaryWaits"`
	Rows         int    `json:"rows"` // rows in the waiting table
	Row          *row   `json:"row"`  // the wait's row, in either table
}

// snapshotJS reads the view through its data attributes (the text is kept only for
// failure messages). %s is the wait id as a JSON string.
const snapshotJS = `(() => {
  const id = %s;
  const $ = (s) => document.querySelector(s);
  const find = (table) => $('#' + table + ' tbody tr[data-wait-id="' + CSS.escape(id) + '"]');
  const tr = find('waiting') || find('finished');
  const out = {
    api: $('#api-status').dataset.state, apiText: $('#api-status').textContent,
    stale: document.body.classList.contains('stale'),
    waitingEmpty: !$('#waiting-empty').hidden, summaryWaits: $('#summary').dataset.waits,
    rows: document.querySelectorAll('#waiting tbody tr').length, row: null,
  };
  if (!tr) return out;
  const r = {
    table: tr.closest('table').id, waitStatus: tr.dataset.waitStatus, executionId: tr.dataset.executionId,
    workflow: tr.dataset.workflow, node: tr.dataset.nodeId, version: tr.dataset.version,
    executionStatus: (tr.querySelector('[data-execution-status]') || {dataset: {}}).dataset.executionStatus || '',
    events: {}, nodes: {}, warnings: {}, countdown: null, text: tr.textContent.replace(/\s+/g, ' ').trim(),
  };
  for (const c of tr.querySelectorAll('[data-event-name]')) r.events[c.dataset.eventName] = {state: c.dataset.eventState, text: c.textContent};
  for (const n of tr.querySelectorAll('[data-node-status]')) r.nodes[n.dataset.nodeId] = n.dataset.nodeStatus;
  for (const w of tr.querySelectorAll('[data-node-id] [data-warning]')) r.warnings[w.closest('[data-node-id]').dataset.nodeId] = w.textContent;
  const cd = tr.querySelector('[data-countdown]');
  if (cd) r.countdown = {state: cd.dataset.countdown, text: cd.textContent, secondsLeft: Number(cd.dataset.secondsLeft)};
  out.row = r;
  return out;
})()`

func (p *page) snapshot(waitID string) (view, error) {
	id, _ := json.Marshal(waitID)
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[view](fmt.Sprintf(snapshotJS, id)))
}

// await polls the page until cond holds for the wait's view, and fails with the last
// view seen when it does not within stepTimeout.
func (p *page) await(t *testing.T, what, waitID string, cond func(v view) bool) view {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	var last view
	var lastErr error
	for {
		v, err := p.snapshot(waitID)
		if err == nil && cond(v) {
			return v
		}
		last, lastErr = v, err
		if time.Now().After(deadline) {
			raw, _ := json.MarshalIndent(last, "", "  ")
			t.Fatalf("%s: not seen within %s (last error: %v); the page showed:\n%s", what, stepTimeout, lastErr, raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *page) screenshot(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv(screenshotDirEnv)
	if dir == "" {
		dir = os.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	path := filepath.Join(dir, "rendezvous-ui-"+name+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
}

// blockAPI makes the tab's requests to the API fail (as when the service is unreachable
// from the operator's browser), or lets them through again.
func (p *page) blockAPI(t *testing.T, block bool) {
	t.Helper()
	var patterns []*network.BlockPattern
	if block {
		patterns = []*network.BlockPattern{{URLPattern: p.base + "/api/*", Block: true}}
	}
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	_, err := chromedp.Call(ctx, network.SetBlockedURLs, network.SetBlockedURLsParams{URLPatterns: patterns})
	require.NoError(t, err)
}

func (p *page) typeFilter(t *testing.T, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	// Setting the value and sending the input event is what typing does; clearing by
	// keystrokes would need one per character.
	arg, _ := json.Marshal(text)
	require.NoError(t, chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`(() => { const f = document.getElementById('filter-workflow'); f.value = %s; f.dispatchEvent(new Event('input', {bubbles: true})); })()`, arg))))
}

func (p *page) location(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	return loc
}

// TestWebViewFollowsAWaitToCompletion is the view end to end, in headless Chromium
// against a real service, PostgreSQL and Kafka-protocol broker: a wait for a callback
// and a Kafka record is listed with both events missing and a running countdown; the
// record arrives and its chip turns arrived while the callback stays missing; the API
// becomes unreachable and the page says so, then recovers; the callback arrives and the
// wait leaves the waiting list and shows completed, with the execution's nodes
// completed. The page loads nothing from any other origin and logs no error.
func TestWebViewFollowsAWaitToCompletion(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t) // first: without a browser, fail before setting anything up
	const topic = "ui.e2e.shipments"

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	fake := newFakeService(t)
	svc := startService(t, cluster)
	base := "http://" + svc.Addr()

	def := map[string]any{
		"name": "ui-e2e", "vars": map[string]any{"svc": fake.url},
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
	}
	status, body := doJSON(t, http.MethodPut, base+"/api/v1/workflows/ui-e2e", def)
	require.Equal(t, http.StatusCreated, status, body)
	status, body = doJSON(t, http.MethodPost, base+"/api/v1/workflows/ui-e2e/executions", map[string]any{"input": map[string]any{}})
	require.Equal(t, http.StatusCreated, status, body)
	execID := body["id"].(string)
	call := fake.nextCall(t)
	require.Equal(t, execID, call["execution_id"])
	corrID := call["correlation_id"].(string)
	status, body = doJSON(t, http.MethodGet, base+"/api/v1/executions/"+execID, nil)
	require.Equal(t, http.StatusOK, status, body)
	waits := body["wait_states"].([]any)
	require.Len(t, waits, 1)
	waitID := waits[0].(map[string]any)["id"].(string)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	p := openBrowser(t, ctx, chromium, base)
	// The bare path redirects to the view.
	navCtx, navCancel := context.WithTimeout(p.ctx, stepTimeout)
	resp, err := chromedp.Run(navCtx, chromedp.NavigateResponse(base+"/ui"))
	navCancel()
	require.NoError(t, err)
	require.Equal(t, int64(http.StatusOK), resp.Status)
	require.Equal(t, base+"/ui/", p.location(t))

	// Listed as waiting: both events missing, a running countdown, the wait's node.
	v := p.await(t, "the wait listed with both events missing", waitID, func(v view) bool {
		r := v.Row
		return v.API == "ok" && r != nil && r.Table == "waiting" && r.Nodes["wait"] != "" &&
			r.Events["api_response"].State == "missing" && r.Events["kafka_event"].State == "missing" &&
			r.Countdown != nil && r.Countdown.State == "running"
	})
	require.Equal(t, "waiting", v.Row.WaitStatus)
	require.Equal(t, execID, v.Row.ExecutionID)
	require.Equal(t, "ui-e2e", v.Row.Workflow)
	require.Equal(t, "wait", v.Row.Node)
	require.Equal(t, "1", v.Row.Version)
	require.Len(t, v.Row.Events, 2, "exactly the enabled events")
	require.Equal(t, "waiting_for_events", v.Row.Nodes["wait"])
	require.Equal(t, "waiting", v.Row.ExecutionStatus)
	require.Contains(t, v.Row.Text, execID[:8], "the short execution id")
	require.Contains(t, v.Row.Text, "all", "the strategy")
	require.Regexp(t, `^in (9|10)m \d\ds$`, v.Row.Countdown.Text, "counting down the 600 s timeout")
	require.Equal(t, "1", v.SummaryWaits)

	// The countdown is live: it moves without anything changing on the server.
	first := v.Row.Countdown.SecondsLeft
	p.await(t, "the countdown moving", waitID, func(v view) bool {
		return v.Row != nil && v.Row.Countdown != nil && v.Row.Countdown.SecondsLeft < first
	})

	// The filter hides what does not match and keeps the choice in the address.
	p.typeFilter(t, "no-such-workflow")
	p.await(t, "the wait hidden by the filter", waitID, func(v view) bool { return v.Row == nil && v.Rows == 0 && v.SummaryWaits == "0" })
	require.Contains(t, p.location(t), "?workflow=no-such-workflow")
	p.typeFilter(t, "E2E")
	p.await(t, "the wait shown again by a matching filter", waitID, func(v view) bool { return v.Row != nil && v.Row.Table == "waiting" })

	// The Kafka record arrives: its chip turns arrived, with its source; the callback
	// is still missing.
	value, err := json.Marshal(map[string]any{"execution_id": execID, "correlation_id": corrID, "status": "shipped"})
	require.NoError(t, err)
	pctx, pcancel := context.WithTimeout(ctx, stepTimeout)
	require.NoError(t, prod.ProduceSync(pctx, &kgo.Record{Topic: topic, Value: value}).FirstErr())
	pcancel()
	v = p.await(t, "the record arrived and the callback still missing", waitID, func(v view) bool {
		r := v.Row
		return r != nil && r.Table == "waiting" && r.Events["kafka_event"].State == "arrived" && r.Events["api_response"].State == "missing"
	})
	require.Contains(t, v.Row.Events["kafka_event"].Text, "kafka "+topic, "the arrival names its source")
	require.Equal(t, "2", v.Row.Version, "the event bumped the wait's version")
	p.screenshot(t, "waiting")

	// The API becomes unreachable: the page says so and keeps the last answer; then it
	// recovers by itself.
	p.blockAPI(t, true)
	v = p.await(t, "the API reported unreachable", waitID, func(v view) bool { return v.API == "error" && v.Stale })
	require.NotNil(t, v.Row, "the last answer stays on screen")
	require.Contains(t, v.APIText, "API unreachable")
	p.blockAPI(t, false)
	p.await(t, "the API reported reachable again", waitID, func(v view) bool { return v.API == "ok" && !v.Stale && v.Row != nil })

	// The callback completes the wait: it leaves the waiting list and shows completed,
	// and the continuation's node completes.
	status, body = doJSON(t, http.MethodPost, base+"/api/internal/callbacks/acme",
		map[string]any{"execution_id": execID, "correlation_id": corrID, "decision": "approved"})
	require.Equal(t, http.StatusAccepted, status, body)
	require.Equal(t, "completed", body["status"])
	v = p.await(t, "the wait completed", waitID, func(v view) bool {
		r := v.Row
		return r != nil && r.Table == "finished" && r.WaitStatus == "completed" &&
			r.Nodes["wait"] == "completed" && r.Nodes["notify"] == "completed" && r.ExecutionStatus == "completed"
	})
	require.Equal(t, "arrived", v.Row.Events["api_response"].State)
	require.Contains(t, v.Row.Events["api_response"].Text, "callback acme")
	require.Equal(t, "arrived", v.Row.Events["kafka_event"].State)
	require.Nil(t, v.Row.Countdown, "a finished wait has no countdown")
	require.True(t, v.WaitingEmpty, "nothing else is waiting")
	require.Zero(t, v.Rows)
	p.screenshot(t, "completed")

	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.problems, "the page logged errors")
	require.Empty(t, p.foreign, "the page loaded something from another origin")
}

// TestWebViewShowsANodeWarning: a wait that times out and continues with partial data
// leaves the waiting list for the finished one with its node completed and the warning
// shown beside it; a node without one shows none.
func TestWebViewShowsANodeWarning(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	fake := newFakeService(t)
	svc := startService(t, cluster)
	base := "http://" + svc.Addr()

	def := map[string]any{
		"name": "ui-partial", "vars": map[string]any{"svc": fake.url},
		"nodes": []any{
			map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
				"apiCall": map[string]any{"url": "@{_vars.svc}/process"}, "timeout": 4, "onTimeout": "continue_with_partial",
			}},
			map[string]any{"id": "notify", "type": "http", "data": map[string]any{"url": "@{_vars.svc}/done", "method": "POST"}},
		},
		"edges": []any{map[string]any{"source": "wait", "target": "notify"}},
	}
	status, body := doJSON(t, http.MethodPut, base+"/api/v1/workflows/ui-partial", def)
	require.Equal(t, http.StatusCreated, status, body)
	status, body = doJSON(t, http.MethodPost, base+"/api/v1/workflows/ui-partial/executions", map[string]any{"input": map[string]any{}})
	require.Equal(t, http.StatusCreated, status, body)
	execID := body["id"].(string)
	fake.nextCall(t)
	status, body = doJSON(t, http.MethodGet, base+"/api/v1/executions/"+execID, nil)
	require.Equal(t, http.StatusOK, status, body)
	waitID := body["wait_states"].([]any)[0].(map[string]any)["id"].(string)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	p := openBrowser(t, ctx, chromium, base)
	navCtx, navCancel := context.WithTimeout(p.ctx, stepTimeout)
	_, err = chromedp.Run(navCtx, chromedp.Navigate(base+"/ui/"))
	navCancel()
	require.NoError(t, err)

	v := p.await(t, "the wait listed as waiting, without a warning", waitID, func(v view) bool {
		return v.Row != nil && v.Row.Table == "waiting" && v.Row.Nodes["wait"] == "waiting_for_events"
	})
	require.Empty(t, v.Row.Warnings)
	v = p.await(t, "the wait timed out and its node completed with a warning", waitID, func(v view) bool {
		r := v.Row
		return r != nil && r.Table == "finished" && r.WaitStatus == "timeout" && r.Nodes["wait"] == "completed" &&
			r.Nodes["notify"] == "completed" && r.Warnings["wait"] != ""
	})
	require.Equal(t, "warning: timed out; continued with partial data, without api_response", v.Row.Warnings["wait"])
	require.NotContains(t, v.Row.Warnings, "notify")
	p.screenshot(t, "warning")

	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.problems, "the page logged errors")
	require.Empty(t, p.foreign, "the page loaded something from another origin")
}
