package console_test

// The workflow builder driven in headless Chromium against a real service: definitions
// authored from an empty canvas through the palette and the properties panel alone,
// errors shown on their fields as they are made, a stored example changed and saved as
// version 2 with its diff, and an execution started from the builder and followed in the
// console. Every stored definition is read back from the API and compared with the one
// written by hand.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
)

// setJS sets a form control's value as typing or choosing does. React tracks the value
// it last rendered, so the value is set through the element prototype's setter (which
// React does not see) and the event React listens for is dispatched. A select's option
// is chosen by its text (the form's options have index values).
const setJS = `(el, v) => {
  if (el.tagName === 'SELECT') {
    const o = [...el.options].find((o) => o.textContent === v) || [...el.options].find((o) => o.value === v);
    if (!o) return false;
    v = o.value;
  }
  const proto = el.tagName === 'SELECT' ? HTMLSelectElement.prototype : el.tagName === 'TEXTAREA' ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
  Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, v);
  el.dispatchEvent(new Event(el.tagName === 'SELECT' ? 'change' : 'input', {bubbles: true}));
  return true;
}`

// set fills the control matching selector with value.
func (p *page) set(t *testing.T, selector, value string) {
	t.Helper()
	p.do(t, "set "+selector, fmt.Sprintf(`(() => { const el = document.querySelector(%s); if (!el) return false; return (%s)(el, %s); })()`,
		q(selector), setJS, q(value)))
}

// fieldErrorJS reads the errors shown under the form field whose control has id (the
// form names their element <id>__error).
func fieldErrorJS(id string) string {
	return fmt.Sprintf(`(() => { if (!document.getElementById(%s)) return '<no field>';
  const e = document.getElementById(%s); return e ? e.textContent : ''; })()`, q(id), q(id+"__error"))
}

// builderState is what the tests read of the builder.
type builderState struct {
	Nodes map[string]int `json:"nodes"` // node id → errors marked on it
	// NodeWarnings: node id → warnings marked on it; Warnings: the bar's count.
	NodeWarnings map[string]int `json:"nodeWarnings"`
	Warnings     int            `json:"warnings"`
	Edges        []string       `json:"edges"` // conditions shown on the edges
	Check        string         `json:"check"` // valid, invalid, checking
	Errors       int            `json:"errors"`
	Version      int            `json:"version"`
	Panel        string         `json:"panel"`
}

const builderJS = `(() => {
  const $ = (s) => document.querySelector(s), $$ = (s) => [...document.querySelectorAll(s)];
  const out = { nodes: {}, nodeWarnings: {}, edges: $$('.edge-cond').map((e) => e.dataset.condition), check: '', errors: 0, warnings: 0, version: 0, panel: '' };
  for (const n of $$('.rdv-node')) { out.nodes[n.dataset.nodeId] = Number(n.dataset.errors); out.nodeWarnings[n.dataset.nodeId] = Number(n.dataset.warnings); }
  const w = $('#builder-warnings'); if (w) out.warnings = Number(w.dataset.warnings);
  const c = $('#builder-check'); if (c) { out.check = c.dataset.state; out.errors = Number(c.dataset.errors); }
  const v = $('#builder-version'); if (v) out.version = Number(v.dataset.version);
  const pnl = $('.builder-side [data-panel]'); if (pnl) out.panel = pnl.dataset.panel;
  return out; })()`

func awaitBuilder(t *testing.T, p *page, what string, cond func(builderState) bool) builderState {
	t.Helper()
	return await(t, p, what, builderJS, cond)
}

func awaitFieldError(t *testing.T, p *page, id, want string) {
	t.Helper()
	await(t, p, "error on "+id, fieldErrorJS(id), func(s string) bool { return strings.Contains(s, want) })
}

func awaitNoFieldError(t *testing.T, p *page, id string) {
	t.Helper()
	await(t, p, "no error on "+id, fieldErrorJS(id), func(s string) bool { return s == "" })
}

// addNode clicks a node type in the palette; the new node is selected.
func (p *page) addNode(t *testing.T, typ string) {
	t.Helper()
	p.click(t, fmt.Sprintf(`.palette-item[data-node-type=%q]`, typ))
}

// selectNode selects a node on the canvas by clicking it.
func (p *page) selectNode(t *testing.T, id string) {
	t.Helper()
	p.do(t, "select node "+id, fmt.Sprintf(`(() => { const el = document.querySelector('.react-flow__node[data-id=%q]'); if (!el) return false;
  for (const type of ['mousedown', 'mouseup', 'click']) el.dispatchEvent(new MouseEvent(type, {bubbles: true, cancelable: true, button: 0, view: window}));
  return true; })()`, id))
	await(t, p, "node "+id+" selected", `(document.querySelector('[data-panel=node]') || {dataset: {}}).dataset.nodeId || ''`,
		func(s string) bool { return s == id })
}

// connect draws an edge from one node's output handle to another's input handle by
// clicking one and then the other.
func (p *page) connect(t *testing.T, from, to string) {
	t.Helper()
	for _, h := range []string{
		fmt.Sprintf(`.react-flow__node[data-id=%q] .react-flow__handle.source`, from),
		fmt.Sprintf(`.react-flow__node[data-id=%q] .react-flow__handle.target`, to),
	} {
		p.click(t, h)
	}
}

// save opens the save dialog and returns the lines its diff marks added or removed.
func (p *page) save(t *testing.T) []string {
	t.Helper()
	p.click(t, "#builder-save")
	diff := await(t, p, "the save dialog's diff", `(() => { const d = document.querySelector('#builder-save-dialog[open]'); if (!d) return null;
  return [...d.querySelectorAll('.diff-line.added, .diff-line.removed')].map((l) => l.textContent); })()`,
		func(v []string) bool { return v != nil })
	return diff
}

func (p *page) confirmSave(t *testing.T, version int) {
	t.Helper()
	p.click(t, "#builder-save-dialog [data-dialog=confirm]")
	await(t, p, fmt.Sprintf("stored as version %d", version), `(document.getElementById('builder-saved') || {dataset: {}}).dataset.version || ''`,
		func(s string) bool { return s == fmt.Sprint(version) })
	p.click(t, "#builder-save-dialog [data-dialog=close]")
	awaitBuilder(t, p, "the builder on the stored version", func(s builderState) bool { return s.Version == version })
}

// storedDefinition reads a workflow's latest definition from the API.
func storedDefinition(t *testing.T, base, name string) (int, any) {
	t.Helper()
	status, body := testkit.DoJSON(t, http.MethodGet, base+"/api/v1/workflows/"+name, nil, nil)
	require.Equal(t, http.StatusOK, status, body)
	return int(body["version"].(float64)), body["definition"]
}

func readJSON(t *testing.T, path string) any {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	return v
}

// TestBuilder drives the builder through its four stories in one browser against one
// service, one after the other (each on a freshly loaded page, with its own workflow
// names): a browser and a service per story would cost more than the stories.
func TestBuilder(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	base := startBuilderService(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	p := openBrowser(t, ctx, chromium, base)
	for _, part := range []struct {
		name string
		run  func(*testing.T, *page, string)
	}{
		{"AuthorsExampleOne", authorExampleOne},
		{"ChangesAStoredExample", changeAStoredExample},
		{"StartsAnExecution", startAnExecution},
		{"AuthorsTheConfigurationExamples", authorTheConfigurationExamples},
		{"AuthorsThePatternsNodeConfiguration", authorThePatternsNodeConfiguration},
	} {
		if !t.Run(part.name, func(t *testing.T) { part.run(t, p, base) }) {
			return // the page is in an unknown state
		}
	}
}

func startBuilderService(t *testing.T) string {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	svc := startService(t, cluster)
	return "http://" + svc.Addr()
}

func (p *page) noProblems(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.problems, "the page logged errors")
	require.Empty(t, p.foreign, "the page loaded something from another origin")
}

// authorExampleOne builds the wait for an API call and a Kafka event with
// strategy all from an empty canvas, through the palette and the panel alone; sees the
// errors of a missing URL and of a custom strategy without requiredEvents appear on
// those fields and the node marked; fixes them, saves, and compares the stored
// definition with the one written by hand.
func authorExampleOne(t *testing.T, p *page, base string) {
	p.navigate(t, base+"/ui/#/builder")
	p.reload(t)

	s := awaitBuilder(t, p, "an empty canvas", func(s builderState) bool { return s.Panel == "definition" && s.Check != "" })
	require.Empty(t, s.Nodes)
	p.set(t, "#wf_name", "example-1")
	p.screenshot(t, "builder-empty", "the builder on a new workflow: palette (wait_events, wait, http), empty canvas, the definition's fields with the name example-1, an error for the missing nodes")

	p.addNode(t, "wait_events")
	awaitBuilder(t, p, "the new node selected", func(s builderState) bool { _, ok := s.Nodes["wait_events_1"]; return ok && s.Panel == "node" })
	p.set(t, "#node-id", "wait")
	awaitBuilder(t, p, "the node renamed", func(s builderState) bool { _, ok := s.Nodes["wait"]; return ok })

	// The API call, enabled, without its URL yet: the URL field says it is required and
	// the node is marked.
	p.set(t, "#data_apiCall_enabled", "true")
	awaitFieldError(t, p, "data_apiCall_url", "required")
	awaitBuilder(t, p, "the node marked", func(s builderState) bool { return s.Nodes["wait"] > 0 && s.Check == "invalid" })
	p.set(t, "#data_apiCall_method", "POST")
	p.set(t, "#data_apiCall_required", "true")
	p.set(t, "#data_kafkaEvent_enabled", "true")
	p.set(t, "#data_kafkaEvent_topic", "process.completed")
	p.set(t, "#data_kafkaEvent_required", "true")
	// A custom strategy needs requiredEvents: the error is on that field.
	p.set(t, "#data_aggregationStrategy", "custom")
	awaitFieldError(t, p, "data_requiredEvents", "required")
	p.set(t, "#data_timeout", "300")
	p.do(t, "scroll to requiredEvents", `(() => { const el = document.getElementById('data_requiredEvents'); if (!el) return false; el.scrollIntoView({block: 'center'}); return true; })()`)
	p.screenshot(t, "builder-errors", "example 1 half built: the wait node marked red with its error count; the panel shows 'required' under the API call's URL and under requiredEvents (strategy custom)")

	p.set(t, "#data_apiCall_url", "https://api.example.com/process")
	awaitNoFieldError(t, p, "data_apiCall_url")
	p.set(t, "#data_aggregationStrategy", "all")
	awaitNoFieldError(t, p, "data_requiredEvents")
	awaitBuilder(t, p, "a valid definition", func(s builderState) bool { return s.Check == "valid" && s.Nodes["wait"] == 0 })

	diff := p.save(t)
	require.NotEmpty(t, diff)
	p.screenshot(t, "builder-save-new", "saving example-1: the dialog shows the whole new definition as added lines")
	p.confirmSave(t, 1)

	v, got := storedDefinition(t, base, "example-1")
	require.Equal(t, 1, v)
	require.Equal(t, readJSON(t, filepath.Join("testdata", "builder", "example-1.json")), got)
	p.screenshot(t, "builder-saved", "example-1 stored as version 1: the wait node on the canvas, 'valid', 'version 1 stored'")
	p.noProblems(t)
}

// changeAStoredExample opens examples/expense-approval.json as stored,
// changes a timeout, and saves version 2: the diff shows that line alone, and the
// stored version 2 differs from version 1 in that value alone.
func changeAStoredExample(t *testing.T, p *page, base string) {
	example := readJSON(t, filepath.Join("..", "..", "examples", "expense-approval.json")).(map[string]any)
	status, body := testkit.DoJSON(t, http.MethodPut, base+"/api/v1/workflows/expense-approval", example, nil)
	require.Equal(t, http.StatusCreated, status, body)
	p.navigate(t, base+"/ui/#/builder/expense-approval")
	p.reload(t)
	s := awaitBuilder(t, p, "the stored workflow drawn", func(s builderState) bool {
		return len(s.Nodes) == 2 && s.Version == 1 && s.Check == "valid"
	})
	require.Equal(t, []string{"output.approved != nil"}, s.Edges)
	p.screenshot(t, "builder-open", "expense-approval as stored (version 1): decision → paid laid out left to right, the edge labelled output.approved != nil")

	p.selectNode(t, "paid")
	p.set(t, "#data_timeout", "96h")
	diff := p.save(t)
	require.Equal(t, []string{`-        "timeout": "168h"`, `+        "timeout": "96h"`}, diff)
	p.screenshot(t, "builder-diff", "saving expense-approval as version 2: the diff folds the unchanged lines and shows only paid's timeout, 168h → 96h")
	p.confirmSave(t, 2)

	v, got := storedDefinition(t, base, "expense-approval")
	require.Equal(t, 2, v)
	example["nodes"].([]any)[1].(map[string]any)["data"].(map[string]any)["timeout"] = "96h"
	require.Equal(t, example, got, "version 2 is version 1 with the one timeout changed")
	p.noProblems(t)
}

// startAnExecution builds http → wait from the palette (one clicked, one dragged onto
// the canvas), connects them on the canvas with a condition edited on the edge, saves,
// starts an execution with an input from the builder and follows it in the console
// until it completes.
func startAnExecution(t *testing.T, p *page, base string) {
	fake, _ := newFakeService(t)
	p.navigate(t, base+"/ui/#/builder")
	p.reload(t)
	awaitBuilder(t, p, "an empty canvas", func(s builderState) bool { return s.Panel == "definition" })
	p.set(t, "#wf_name", "ping")
	// vars typed in the JSON tab: the same document, so the URL field below offers them.
	p.click(t, "#tab-json")
	p.do(t, "add vars in the JSON tab", fmt.Sprintf(`(() => { const ta = document.getElementById('builder-json'); if (!ta) return false;
  const doc = JSON.parse(ta.value); doc.vars = {svc: %s}; return (%s)(ta, JSON.stringify(doc, null, 2)); })()`, q(fake.URL), setJS))
	p.click(t, "#tab-properties")
	await(t, p, "vars in the definition's form", `(document.getElementById('wf_vars') || {}).value || ''`,
		func(s string) bool { return strings.Contains(s, fake.URL) })

	p.addNode(t, "http")
	awaitBuilder(t, p, "the http node", func(s builderState) bool { _, ok := s.Nodes["http_1"]; return ok && s.Panel == "node" })
	// The URL's suggestions are the templates in scope: the vars, the execution's id.
	names := await(t, p, "template suggestions", `[...document.querySelectorAll('#data_url-suggestions option')].map((o) => o.value)`,
		func(v []string) bool { return len(v) > 0 })
	require.Contains(t, names, "@{_vars.svc}")
	p.set(t, "#data_url", "@{_vars.svc}/done")
	p.set(t, "#data_method", "POST")
	// The wait node dragged from the palette and dropped on the canvas, right of http_1.
	p.do(t, "drag wait onto the canvas", `(() => { const src = document.querySelector('.palette-item[data-node-type=wait]'), pane = document.querySelector('.builder-canvas');
  if (!src || !pane) return false;
  const dt = new DataTransfer(), r = pane.getBoundingClientRect();
  src.dispatchEvent(new DragEvent('dragstart', {bubbles: true, cancelable: true, dataTransfer: dt}));
  const at = {bubbles: true, cancelable: true, dataTransfer: dt, clientX: r.left + r.width * 0.8, clientY: r.top + r.height / 2};
  pane.dispatchEvent(new DragEvent('dragover', at)); pane.dispatchEvent(new DragEvent('drop', at)); return true; })()`)
	awaitBuilder(t, p, "the wait node", func(s builderState) bool { _, ok := s.Nodes["wait_1"]; return ok && s.Panel == "node" })
	p.set(t, "#data_for", "1s")
	p.connect(t, "http_1", "wait_1")
	awaitBuilder(t, p, "the edge", func(s builderState) bool { return len(s.Edges) == 1 })
	p.click(t, ".edge-cond-label")
	p.set(t, ".edge-cond-input", "output.status == 200")
	awaitBuilder(t, p, "the condition on the edge, and a valid definition", func(s builderState) bool {
		return len(s.Edges) == 1 && s.Edges[0] == "output.status == 200" && s.Check == "valid"
	})
	p.click(t, "#builder-layout")
	p.click(t, "#tab-json")
	shown := await(t, p, "the JSON tab", `(document.getElementById('builder-json') || {}).value || ''`, func(s string) bool { return s != "" })
	p.screenshot(t, "builder-json", "the JSON tab of ping: the same definition as the canvas, the edge's condition included")
	p.click(t, "#tab-properties")
	var inTab any
	require.NoError(t, json.Unmarshal([]byte(shown), &inTab))
	p.screenshot(t, "builder-flow", "ping: http_1 → wait_1 connected on the canvas, the edge's condition output.status == 200 edited in its label")
	p.save(t)
	p.confirmSave(t, 1)

	_, got := storedDefinition(t, base, "ping")
	require.Equal(t, map[string]any{
		"name": "ping", "vars": map[string]any{"svc": fake.URL},
		"nodes": []any{
			map[string]any{"id": "http_1", "type": "http", "data": map[string]any{"url": "@{_vars.svc}/done", "method": "POST"}},
			map[string]any{"id": "wait_1", "type": "wait", "data": map[string]any{"for": "1s"}},
		},
		"edges": []any{map[string]any{"source": "http_1", "target": "wait_1", "condition": "output.status == 200"}},
	}, got)
	require.Equal(t, got, inTab, "the JSON tab showed what was stored")

	p.click(t, "#builder-start")
	p.set(t, "#builder-start-input", `{"order": 7}`)
	p.screenshot(t, "builder-start", "the start dialog with the input {\"order\": 7}")
	p.click(t, "#builder-start-dialog [data-dialog=confirm]")
	v := awaitExec(t, p, "the started execution completed in the console", func(v execPage) bool {
		return v.ID != "" && v.Status == "completed" && v.Nodes["http_1"].State == "completed" && v.Nodes["wait_1"].State == "completed"
	})
	require.Contains(t, p.location(t), "#/executions/"+v.ID)
	p.screenshot(t, "builder-started", "the execution started from the builder, completed in the console: http_1 and wait_1 green")
	p.noProblems(t)
}

// authorTheConfigurationExamples authors each configuration example (see
// testdata/builder/README.md) in the builder from an empty canvas, field by field in
// the panel, and compares each stored definition with the one written by hand.
func authorTheConfigurationExamples(t *testing.T, p *page, base string) {

	for _, n := range []int{2, 3, 4, 5} {
		want := readJSON(t, filepath.Join("testdata", "builder", fmt.Sprintf("example-%d.json", n))).(map[string]any)
		name := want["name"].(string)
		node := want["nodes"].([]any)[0].(map[string]any)
		p.navigate(t, base+"/ui/#/builder")
		p.reload(t)
		awaitBuilder(t, p, "an empty canvas", func(s builderState) bool { return s.Panel == "definition" && len(s.Nodes) == 0 })
		p.set(t, "#wf_name", name)
		p.addNode(t, node["type"].(string))
		awaitBuilder(t, p, "the new node", func(s builderState) bool { return s.Panel == "node" })
		p.set(t, "#node-id", node["id"].(string))
		awaitBuilder(t, p, "the node renamed", func(s builderState) bool { _, ok := s.Nodes[node["id"].(string)]; return ok })
		p.fillForm(t, "data", node["data"].(map[string]any))
		awaitBuilder(t, p, name+" valid", func(s builderState) bool { return s.Check == "valid" })
		p.screenshot(t, fmt.Sprintf("builder-example-%d", n), fmt.Sprintf("configuration example %d authored in the panel, valid, before saving", n))
		p.save(t)
		p.confirmSave(t, 1)
		_, got := storedDefinition(t, base, name)
		require.Equal(t, want, got, "example %d", n)
	}
	p.noProblems(t)
}

// fillForm types a value into the form field by field, in the order of its keys as
// the fixture has them: the form's ids are the JSON path joined by _ (rjsf's naming).
// Booleans and enums are chosen in their selects, requiredEvents ticked among the
// enabled events.
func (p *page) fillForm(t *testing.T, prefix string, v map[string]any) {
	t.Helper()
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	// Objects first, so that a strategy or a list choosing among events finds them.
	sort.SliceStable(keys, func(i, j int) bool {
		_, oi := v[keys[i]].(map[string]any)
		_, oj := v[keys[j]].(map[string]any)
		return oi && !oj
	})
	for _, k := range keys {
		id := prefix + "_" + k
		switch val := v[k].(type) {
		case map[string]any:
			p.fillForm(t, id, val)
		case []any:
			for _, item := range val {
				p.do(t, "tick "+fmt.Sprint(item), fmt.Sprintf(`(() => { const g = document.getElementById(%s); if (!g) return false;
  const l = [...g.querySelectorAll('label')].find((l) => l.textContent.trim() === %s); if (!l) return false;
  const box = l.querySelector('input'); if (!box.checked) box.click(); return true; })()`, q(id), q(fmt.Sprint(item))))
			}
		case bool, float64:
			p.set(t, "#"+id, fmt.Sprint(val))
		case string:
			p.set(t, "#"+id, val)
		default:
			t.Fatalf("fillForm: %s has a value the form test does not type: %v", id, val)
		}
	}
}

// authorThePatternsNodeConfiguration pastes the pattern document's node configuration,
// as the document writes it (testkit.PatternExamples), into the JSON tab of a new
// workflow: it is valid, and its requiredEvents — unused under strategy all — is a
// warning, apart from the errors: on the bar, on the node, in the node's panel and in the
// save dialog. So is the token var its headers read, stored as written: its name looks
// like a credential's. It is stored as written.
func authorThePatternsNodeConfiguration(t *testing.T, p *page, base string) {
	ex := testkit.PatternExamples(t)[0]
	var node map[string]any
	require.NoError(t, json.Unmarshal(ex.Node, &node))
	node["id"] = "wait"
	def := map[string]any{"name": "pattern-node", "vars": map[string]any{"token": "t"}, "nodes": []any{node}}
	raw, err := json.MarshalIndent(def, "", "  ")
	require.NoError(t, err)

	p.navigate(t, base+"/ui/#/builder")
	p.reload(t)
	awaitBuilder(t, p, "an empty canvas", func(s builderState) bool { return s.Panel == "definition" && len(s.Nodes) == 0 })
	p.click(t, "#tab-json")
	p.set(t, "#builder-json", string(raw))
	s := awaitBuilder(t, p, "valid, with two warnings", func(s builderState) bool { return s.Check == "valid" && s.Warnings == 2 })
	require.Equal(t, map[string]int{"wait": 0}, s.Nodes, "no error is marked")
	require.Equal(t, map[string]int{"wait": 1}, s.NodeWarnings)
	jsonTab := await(t, p, "the warning under the JSON", `[...document.querySelectorAll('[data-panel=json] .builder-warnings li')].map((l) => l.dataset.path)`,
		func(v []string) bool { return len(v) == 2 })
	require.ElementsMatch(t, []string{"nodes[0].data.requiredEvents", "vars.token"}, jsonTab)
	require.Equal(t, 0, await(t, p, "no error list", `document.querySelectorAll('.builder-errors').length`, func(int) bool { return true }))

	p.click(t, "#tab-properties")
	p.selectNode(t, "wait")
	msg := await(t, p, "the warning in the node's panel", `(() => { const l = document.querySelector('[data-panel=node] .builder-warnings li[data-path="nodes[0].data.requiredEvents"]'); return l ? l.textContent : ''; })()`,
		func(v string) bool { return v != "" })
	require.Contains(t, msg, `ignored: only used with aggregationStrategy "custom"`)
	p.screenshot(t, "builder-warning", "the pattern document's node configuration pasted as written: valid, two warnings on the bar and one on the node (amber, not red), and the node's panel saying requiredEvents is ignored under strategy all")

	p.save(t)
	p.click(t, "#builder-save-dialog [data-dialog=confirm]")
	await(t, p, "the save dialog's warning", `[...document.querySelectorAll('#builder-save-dialog .builder-warnings li')].map((l) => l.dataset.path)`,
		func(v []string) bool {
			return len(v) == 2 && slices.Contains(v, "nodes[0].data.requiredEvents") && slices.Contains(v, "vars.token")
		})
	await(t, p, "stored as version 1", `(document.getElementById('builder-saved') || {dataset: {}}).dataset.version || ''`,
		func(s string) bool { return s == "1" })
	p.click(t, "#builder-save-dialog [data-dialog=close]")
	_, got := storedDefinition(t, base, "pattern-node")
	var want any
	require.NoError(t, json.Unmarshal(raw, &want))
	require.Equal(t, want, got)
	p.noProblems(t)
}
