package console_test

// The console as a new operator meets it, in headless Chromium against a real service:
// every page at 1400 and 1024 px with nothing an operator acts on out of reach, a missing
// execution, the builder's forms, its JSON tab, its save flow, its drafts, and what the
// Send event form offers. Each part is one story; they share one service and one browser
// because a browser per story would cost more than the stories.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
)

// widths are the viewport widths every page must fit: a laptop and a small one.
var widths = []int64{1400, 1024}

// journey is what the stories share: the service, its fake external service and the
// executions set up before the browser opens.
type journey struct {
	base      string
	fake      *testkit.FakeService
	nextCall  func(t *testing.T) map[string]any
	waiting   string // a shipment waiting for its callback and record
	corrID    string // the waiting shipment's correlation id
	failed    string // an approval whose wait was cancelled with fail
	deadOwner string // a cool-off execution cancelled with a buffered event: one dead letter
}

func (j *journey) put(t *testing.T, def map[string]any) {
	t.Helper()
	status, body := testkit.DoJSON(t, http.MethodPut, j.base+"/api/v1/workflows/"+def["name"].(string), def, nil)
	require.Equal(t, http.StatusCreated, status, body)
}

func (j *journey) start(t *testing.T, name string, input map[string]any) string {
	t.Helper()
	status, body := testkit.DoJSON(t, http.MethodPost, j.base+"/api/v1/workflows/"+name+"/executions", map[string]any{"input": input}, nil)
	require.Equal(t, http.StatusCreated, status, body)
	return body["id"].(string)
}

// setUpJourney stores the workflows and makes one of each thing a page lists: a waiting
// execution, an unmatched (late) callback, a failed execution and a dead letter.
func setUpJourney(t *testing.T) *journey {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	j := &journey{}
	j.fake, j.nextCall = newFakeService(t)
	j.base = "http://" + startService(t, cluster).Addr()

	j.put(t, map[string]any{
		"name": "shipment", "vars": map[string]any{"svc": j.fake.URL}, "display": "@{_trigger.order} · @{_trigger.amount} EUR",
		"nodes": []any{
			map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
				"apiCall":    map[string]any{"url": "@{_vars.svc}/process"},
				"kafkaEvent": map[string]any{"topic": "journey.shipments"},
				"timeout":    600,
			}},
			map[string]any{"id": "notify", "type": "http", "data": map[string]any{"url": "@{_vars.svc}/done", "method": "POST"}},
		},
		"edges": []any{map[string]any{"source": "wait", "target": "notify"}},
	})
	j.put(t, map[string]any{
		"name": "approval", "vars": map[string]any{"svc": j.fake.URL},
		"nodes": []any{
			map[string]any{"id": "approval", "type": "wait_events", "data": map[string]any{
				"events": []any{map[string]any{"name": "approval", "source": "send", "type": "approved"}}, "timeout": 600,
			}},
			map[string]any{"id": "approved", "type": "http", "data": map[string]any{"url": "@{_vars.svc}/done", "method": "POST"}},
		},
		"edges": []any{map[string]any{"source": "approval", "target": "approved"}},
	})
	j.put(t, map[string]any{"name": "cool-off", "nodes": []any{map[string]any{"id": "cool_off", "type": "wait", "data": map[string]any{"for": "1h"}}}})

	// A shipment waiting for its record, with its callback arrived twice.
	done := j.start(t, "shipment", map[string]any{"order": "A-1001", "amount": 120})
	call := j.nextCall(t)
	status, body := testkit.DoJSON(t, http.MethodPost, j.base+"/api/internal/callbacks/acme",
		map[string]any{"execution_id": done, "correlation_id": call["correlation_id"], "decision": "ok"}, nil)
	require.Equal(t, http.StatusAccepted, status, body)
	// The wait still needs the Kafka record: a second callback is an api_response
	// already recorded, listed as unmatched.
	testkit.DoJSON(t, http.MethodPost, j.base+"/api/internal/callbacks/acme",
		map[string]any{"execution_id": done, "correlation_id": call["correlation_id"], "decision": "again"}, nil)
	j.waiting, j.corrID = done, call["correlation_id"].(string)

	j.failed = j.start(t, "approval", map[string]any{"order": "A-1002", "amount": 80})
	status, body = testkit.DoJSON(t, http.MethodPost, j.base+"/api/v1/executions/"+j.failed+"/waits/approval/cancel", map[string]any{"then": "fail", "reason": "wrong approver"}, nil)
	require.Equal(t, http.StatusOK, status, body)

	j.deadOwner = j.start(t, "cool-off", map[string]any{"order": "A-1003"})
	status, body = testkit.DoJSON(t, http.MethodPost, j.base+"/api/v1/executions/"+j.deadOwner+"/events", map[string]any{"type": "reminder", "payload": map[string]any{"n": 1}}, nil)
	require.Equal(t, http.StatusAccepted, status, body)
	status, body = testkit.DoJSON(t, http.MethodPost, j.base+"/api/v1/executions/"+j.deadOwner+"/cancel", map[string]any{"reason": "journey"}, nil)
	require.Equal(t, http.StatusOK, status, body)
	return j
}

// TestConsoleJourney runs the stories in order on one page; a story that fails leaves
// the page in an unknown state, so the rest are not run.
func TestConsoleJourney(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	j := setUpJourney(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	p := openBrowser(t, ctx, chromium, j.base)
	for _, part := range []struct {
		name string
		run  func(*testing.T, *page, *journey)
	}{
		{"EveryPageFits", everyPageFits},
		{"MissingExecution", missingExecution},
		{"AddButtonsShow", addButtonsShow},
		{"InvalidJSON", invalidJSON},
		{"SaveFlow", saveFlow},
		{"DraftsSurvive", draftsSurvive},
		{"SendEventSaysWhoTakesIt", sendEventSaysWhoTakesIt},
		{"ExecutionsToldApart", executionsToldApart},
		{"SmallerThings", smallerThings},
	} {
		if !t.Run(part.name, func(t *testing.T) { part.run(t, p, j) }) {
			return
		}
	}
	p.noProblems(t)
}

// viewport sets the page's viewport width (900 px high).
func (p *page) viewport(t *testing.T, width int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(width, 900)))
}

// reachJS lists what an operator cannot reach on the page: the document wider than the
// viewport, and each visible action button (an action, a row's action, the builder's
// bar, a pager, a filter's Apply) whose middle is not on screen or is covered (cut off
// by a table scrolled sideways, say). The page is scrolled vertically to each in turn.
const reachJS = `(() => {
  const out = { width: innerWidth, scrollWidth: document.documentElement.scrollWidth, unreachable: [], checked: 0 };
  const sel = 'button[data-action], .row-actions button, .builder-bar button, .pager button, form[role=search] button';
  const buttons = [...document.querySelectorAll(sel)].filter((b) => b.getClientRects().length > 0 && getComputedStyle(b).visibility !== 'hidden');
  for (const b of buttons) {
    let r = b.getBoundingClientRect();
    window.scrollBy(0, r.top - innerHeight / 2);
    r = b.getBoundingClientRect();
    const x = r.left + r.width / 2, y = r.top + r.height / 2;
    const at = document.elementFromPoint(x, y);
    out.checked++;
    if (r.left < 0 || r.right > innerWidth || !at || !(at === b || b.contains(at))) {
      out.unreachable.push((b.dataset.action || b.id || b.textContent.trim()) + ' at x=' + Math.round(r.left) + '..' + Math.round(r.right));
    }
  }
  window.scrollTo(0, 0);
  return out;
})()`

type reach struct {
	Width       int      `json:"width"`
	ScrollWidth int      `json:"scrollWidth"`
	Unreachable []string `json:"unreachable"`
	Checked     int      `json:"checked"`
}

// requireReachable fails when the page is wider than its viewport or an action button
// lies outside it.
func (p *page) requireReachable(t *testing.T, what string, width int64) {
	t.Helper()
	r, err := eval[reach](p, reachJS)
	require.NoError(t, err)
	require.LessOrEqual(t, r.ScrollWidth, int(width), "%s at %d px: the page is wider than the window", what, width)
	require.Empty(t, r.Unreachable, "%s at %d px: action buttons out of reach (%d checked)", what, width, r.Checked)
}

// axeFindings runs axe-core (from the console's npm dependencies, injected into the page)
// and returns its serious and critical violations, each as rule: target.
func (p *page) axeFindings(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("web", "node_modules", "axe-core", "axe.min.js"))
	require.NoError(t, err, "axe-core is installed with the console's npm dependencies: run `make ui` (npm ci in server/console/web)")
	ctx, cancel := context.WithTimeout(p.ctx, 60*time.Second)
	defer cancel()
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](string(src)+";true"))
	require.NoError(t, err)
	found, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`axe.run(document, { resultTypes: ['violations'] }).then((r) => r.violations
  .filter((v) => v.impact === 'serious' || v.impact === 'critical')
  .flatMap((v) => v.nodes.map((n) => v.id + ': ' + n.target.join(' ') + ' — ' + (n.failureSummary || '').replace(/\s+/g, ' '))))`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	return found
}

// consolePage is a page of the console, how to open it and what shows it has loaded.
type consolePage struct {
	name, path, loaded string
}

// everyPageFits opens every page at each width: the page is no wider than the window,
// every action button is on screen, a screenshot is kept, and axe-core finds nothing
// serious on it.
func everyPageFits(t *testing.T, p *page, j *journey) {
	pages := []consolePage{
		{"executions", "#/executions", `document.querySelectorAll('#executions tbody tr').length >= 3 && document.querySelectorAll('#finished tbody tr').length >= 1`},
		{"execution", "#/executions/" + j.waiting, `document.querySelectorAll('#execution-unmatched tbody tr').length >= 1 && !!document.querySelector('.graph .node')`},
		{"execution-failed", "#/executions/" + j.failed, `!!document.querySelector('.action-block[data-action-block=redrive]:not([hidden])') && !!document.querySelector('.graph .node')`},
		{"waits", "#/waits", `document.querySelectorAll('#waiting tbody tr').length >= 1`},
		{"unmatched", "#/unmatched", `document.querySelectorAll('#unmatched tbody tr').length >= 1`},
		{"dead-letters", "#/dead-letters", `document.querySelectorAll('#dead-letters tbody tr').length >= 1`},
		{"builder", "#/builder/shipment", `document.querySelectorAll('.rdv-node').length === 2 && document.getElementById('builder-check').dataset.state === 'valid'`},
	}
	var axe []string
	for _, w := range widths {
		p.viewport(t, w)
		for _, pg := range pages {
			p.navigate(t, j.base+"/ui/"+pg.path)
			await(t, p, pg.name+" loaded", pg.loaded, func(b bool) bool { return b })
			p.requireReachable(t, pg.name, w)
			p.screenshot(t, fmt.Sprintf("%s-%d", pg.name, w), fmt.Sprintf("the %s page at %d px", pg.name, w))
			if w == widths[0] {
				for _, f := range p.axeFindings(t) {
					axe = append(axe, pg.name+": "+f)
				}
			}
		}
	}
	require.Empty(t, axe, "axe-core: serious or critical accessibility violations\n%s", strings.Join(axe, "\n"))
}

// missingExecution opens an execution that does not exist: the page shows the 404 and a
// search box, and nothing that belongs to an execution (no actions, no graph loading for
// ever); the search box finds executions.
func missingExecution(t *testing.T, p *page, j *journey) {
	const unknown = "01a25000-0000-7000-8000-000000000000"
	type missing struct {
		Problem string   `json:"problem"`
		Visible []string `json:"visible"`
		Search  bool     `json:"search"`
	}
	for _, w := range widths {
		p.viewport(t, w)
		p.navigate(t, j.base+"/ui/#/executions/"+unknown)
		m := await(t, p, "the 404 shown", `(() => {
  const shown = (el) => el && el.getClientRects().length > 0;
  const pr = document.querySelector('#execution-problem .problem');
  return { problem: pr ? pr.textContent : '',
    visible: [...document.querySelectorAll('.action-block, #graph-wrap, #node-panel, #timeline, #execution-unmatched, #execution-head')].filter(shown).map((e) => e.dataset.actionBlock || e.id),
    search: shown(document.querySelector('.execution form[role=search] input[type=search]')) };
})()`, func(m missing) bool { return m.Problem != "" })
		require.Contains(t, m.Problem, "404")
		require.Empty(t, m.Visible, "a missing execution shows nothing of an execution")
		require.True(t, m.Search, "a search box is offered")
		p.requireReachable(t, "missing execution", w)
		p.screenshot(t, fmt.Sprintf("missing-execution-%d", w), fmt.Sprintf("an execution that does not exist at %d px: the 404 and a search box, nothing else", w))
	}
	require.Empty(t, p.axeFindings(t), "axe-core on the missing execution's page")
	p.fill(t, ".execution form[role=search] input[type=search]", j.corrID)
	p.do(t, "search", `(() => { document.querySelector('.execution form[role=search]').requestSubmit(); return true; })()`)
	await(t, p, "the search's answer", `[...document.querySelectorAll('#executions tbody tr')].map((tr) => tr.dataset.executionId)`,
		func(ids []string) bool { return len(ids) == 1 && ids[0] == j.waiting })
}

// unlabelledJS lists the buttons of the builder's properties panel that show no words
// (an empty text or a box too small to hold any), each as its id or class.
const unlabelledJS = `[...document.querySelectorAll('.builder-panel button')]
  .filter((b) => b.getClientRects().length > 0)
  .filter((b) => { const r = b.getBoundingClientRect(); return b.innerText.trim() === '' || r.width < 24 || r.height < 16; })
  .map((b) => (b.id || b.className) + ' ' + Math.round(b.getBoundingClientRect().width) + 'x' + Math.round(b.getBoundingClientRect().height))`

// addButtonsShow opens the forms that have Add buttons (a wait's events, an HTTP node's
// headers, the workflow's triggers): each button says what it does and adds an item.
func addButtonsShow(t *testing.T, p *page, j *journey) {
	p.viewport(t, widths[0])
	p.navigate(t, j.base+"/ui/#/builder")
	awaitBuilder(t, p, "a new workflow", func(s builderState) bool { return s.Panel == "definition" })
	const fieldsJS = `document.querySelectorAll('.builder-panel input, .builder-panel select, .builder-panel textarea').length`
	for _, form := range []struct{ what, open, add string }{
		{"the workflow's triggers", "", "#wf_triggers__add"},
		{"a wait's events", "wait_events", "#data_events__add"},
		{"an HTTP node's headers", "http", "#data_headers__add"},
	} {
		if form.open != "" {
			p.addNode(t, form.open)
			awaitBuilder(t, p, "the new node's panel", func(s builderState) bool { return s.Panel == "node" })
		}
		bad := await(t, p, form.what+": the form drawn", unlabelledJS, func(v []string) bool { return v != nil })
		require.Empty(t, bad, "%s: buttons that show no words", form.what)
		label, err := eval[string](p, fmt.Sprintf(`(document.querySelector(%s) || {}).innerText || ''`, q(form.add)))
		require.NoError(t, err)
		require.Equal(t, "+ Add", label, "%s: the Add button", form.what)
		before, err := eval[int](p, fieldsJS)
		require.NoError(t, err)
		p.click(t, form.add)
		await(t, p, form.what+": an item added", fieldsJS, func(n int) bool { return n > before })
	}
	p.screenshot(t, "builder-add-buttons", "the builder's HTTP node with a header added through its '+ Add' button")
}

// saveEnabledJS is whether the builder's Save button may be pressed.
const saveEnabledJS = `(() => { const b = document.getElementById('builder-save'); return !!b && !b.disabled; })()`

// invalidJSON types in the JSON tab: a change that is JSON is the document (Save
// enabled); text that is not JSON makes the header say so and disables Save, and it is
// still there after a look at the properties; made JSON again, it is the document.
func invalidJSON(t *testing.T, p *page, j *journey) {
	p.navigate(t, j.base+"/ui/#/builder/cool-off")
	awaitBuilder(t, p, "cool-off opened", func(s builderState) bool { return s.Version == 1 && s.Check == "valid" })
	p.click(t, "#tab-json")
	const changed = `{"name": "cool-off", "nodes": [{"id": "cool_off", "type": "wait", "data": {"for": "2h"}}]}`
	p.set(t, "#builder-json", changed)
	awaitBuilder(t, p, "the change checked", func(s builderState) bool { return s.Check == "valid" })
	await(t, p, "Save enabled for a valid change", saveEnabledJS, func(b bool) bool { return b })

	const broken = `{"name": "cool-off", "nodes": [{"id": "cool_off", "type": "wait", "data": {"for": "3h"`
	p.set(t, "#builder-json", broken)
	type header struct {
		State string `json:"state"`
		Text  string `json:"text"`
		Save  bool   `json:"save"`
	}
	const headerJS = `(() => { const c = document.getElementById('builder-check'), b = document.getElementById('builder-save');
  return { state: c.dataset.state, text: c.textContent, save: !!b && !b.disabled }; })()`
	hd := await(t, p, "the header says the JSON is invalid", headerJS, func(h header) bool { return h.State == "invalid" })
	require.Equal(t, "invalid JSON", hd.Text)
	require.False(t, hd.Save, "Save is disabled while the JSON tab's text is not JSON")
	p.screenshot(t, "builder-invalid-json", "the builder's JSON tab with text that is not JSON: the header says 'invalid JSON', Save disabled, the parse error under the text")

	p.click(t, "#tab-properties")
	awaitBuilder(t, p, "the properties shown", func(s builderState) bool { return s.Panel == "definition" })
	hd, err := eval[header](p, headerJS)
	require.NoError(t, err)
	require.Equal(t, header{State: "invalid", Text: "invalid JSON"}, hd, "the header keeps saying so on another tab")
	p.click(t, "#tab-json")
	text := await(t, p, "the JSON tab again", `(document.getElementById('builder-json') || {}).value || ''`, func(s string) bool { return s != "" })
	require.Equal(t, broken, text, "what was typed is kept")

	p.set(t, "#builder-json", broken+`}}]}`)
	awaitBuilder(t, p, "the JSON valid again", func(s builderState) bool { return s.Check == "valid" })
	await(t, p, "Save enabled again", saveEnabledJS, func(b bool) bool { return b })
	doc, err := eval[string](p, `document.getElementById('builder-json').value`)
	require.NoError(t, err)
	require.Contains(t, doc, `"3h"`)
}

// saveDialogJS reads the open save dialog: its title and its text.
const saveDialogJS = `(() => { const d = document.querySelector('#builder-save-dialog[open]'); if (!d) return null;
  return { title: d.querySelector('h3').textContent, text: d.textContent }; })()`

type saveDialog struct {
	Title string `json:"title"`
	Text  string `json:"text"`
}

// saveFlow stores a new workflow and then a second version of it: Save is disabled while
// errors remain, saying why; the dialog says what it will do and then what it did,
// without contradicting itself; the picker names the workflow just stored.
func saveFlow(t *testing.T, p *page, j *journey) {
	p.navigate(t, j.base+"/ui/#/builder")
	awaitBuilder(t, p, "a new workflow", func(s builderState) bool { return s.Panel == "definition" && s.Version == 0 })
	p.click(t, "#tab-json")
	p.set(t, "#builder-json", `{"name": "journey-new", "nodes": [{"id": "pause", "type": "wait", "data": {}}]}`)
	awaitBuilder(t, p, "the error found", func(s builderState) bool { return s.Check == "invalid" && s.Errors > 0 })
	why, err := eval[string](p, `(() => { const b = document.getElementById('builder-save'); return b.disabled ? b.title : 'enabled'; })()`)
	require.NoError(t, err)
	require.Contains(t, why, "error(s) first", "Save is disabled while errors remain, and says why")

	p.set(t, "#builder-json", `{"name": "journey-new", "nodes": [{"id": "pause", "type": "wait", "data": {"for": "1h"}}]}`)
	awaitBuilder(t, p, "the document valid", func(s builderState) bool { return s.Check == "valid" })
	await(t, p, "Save enabled", saveEnabledJS, func(b bool) bool { return b })
	p.save(t)
	d := await(t, p, "the save dialog", saveDialogJS, func(d *saveDialog) bool { return d != nil })
	require.Equal(t, "Save journey-new as version 1", d.Title)
	p.click(t, "#builder-save-dialog [data-dialog=confirm]")
	d = await(t, p, "the dialog says it was stored", saveDialogJS, func(d *saveDialog) bool { return d != nil && strings.HasPrefix(d.Title, "Saved") })
	require.Equal(t, "Saved journey-new: version 1", d.Title)
	require.Contains(t, d.Text, "Stored journey-new as version 1, its first version.")
	require.NotContains(t, d.Text, "version 2", "the dialog does not speak of a version it did not store")
	p.screenshot(t, "builder-saved-new", "a new workflow stored: the dialog says 'Saved journey-new: version 1' and what that means")
	p.click(t, "#builder-save-dialog [data-dialog=close]")
	picker := await(t, p, "the picker on the stored workflow", `document.getElementById('builder-open').value`, func(s string) bool { return s != "" })
	require.Equal(t, "journey-new", picker)
	require.Contains(t, p.location(t), "#/builder/journey-new")

	p.set(t, "#builder-json", `{"name": "journey-new", "nodes": [{"id": "pause", "type": "wait", "data": {"for": "2h"}}]}`)
	awaitBuilder(t, p, "the change checked", func(s builderState) bool { return s.Check == "valid" && s.Version == 1 })
	await(t, p, "Save enabled", saveEnabledJS, func(b bool) bool { return b })
	p.save(t)
	d = await(t, p, "the save dialog", saveDialogJS, func(d *saveDialog) bool { return d != nil })
	require.Equal(t, "Save journey-new as version 2", d.Title)
	p.click(t, "#builder-save-dialog [data-dialog=confirm]")
	d = await(t, p, "the dialog says it was stored", saveDialogJS, func(d *saveDialog) bool { return d != nil && strings.HasPrefix(d.Title, "Saved") })
	require.Equal(t, "Saved journey-new: version 2", d.Title)
	require.Contains(t, d.Text, "Stored journey-new as version 2, after version 1.")
	require.NotContains(t, d.Text, "version 3")
	p.click(t, "#builder-save-dialog [data-dialog=close]")
	awaitBuilder(t, p, "the builder on version 2", func(s builderState) bool { return s.Version == 2 })
	version, _ := storedDefinition(t, j.base, "journey-new")
	require.Equal(t, 2, version)
}

// leaveAskedJS is whether leaving the page now would be questioned: a beforeunload
// event the page cancels. (A headless page without a user's gesture shows no prompt, so
// the test asks the page's handler directly.)
const leaveAskedJS = `(() => { const e = new Event('beforeunload', { cancelable: true }); window.dispatchEvent(e); return e.defaultPrevented; })()`

// jsonTextJS is the builder's document as its JSON tab shows it.
const jsonTextJS = `(() => { const t = document.getElementById('tab-json'); if (t && t.getAttribute('aria-selected') !== 'true') t.click();
  return (document.getElementById('builder-json') || {}).value || ''; })()`

// draftsSurvive edits a stored workflow and a new one: leaving would be questioned, a
// reload restores each edit with a notice, Back then Forward keeps it, and Discard goes
// back to the stored version.
func draftsSurvive(t *testing.T, p *page, j *journey) {
	p.navigate(t, j.base+"/ui/#/builder/approval")
	awaitBuilder(t, p, "approval opened", func(s builderState) bool { return s.Version == 1 && s.Check == "valid" })
	asked, err := eval[bool](p, leaveAskedJS)
	require.NoError(t, err)
	require.False(t, asked, "nothing to lose yet")
	p.click(t, "#tab-json")
	text, err := eval[string](p, jsonTextJS)
	require.NoError(t, err)
	require.Contains(t, text, `"timeout": 600`)
	p.set(t, "#builder-json", strings.Replace(text, `"timeout": 600`, `"timeout": 900`, 1))
	awaitBuilder(t, p, "the edit checked", func(s builderState) bool { return s.Check == "valid" })
	asked, err = eval[bool](p, leaveAskedJS)
	require.NoError(t, err)
	require.True(t, asked, "leaving with unsaved changes is questioned")

	p.reload(t)
	notice := await(t, p, "the draft restored after a reload", `(document.getElementById('builder-draft') || {}).textContent || ''`, func(s string) bool { return s != "" })
	require.Contains(t, notice, "Restored the unsaved changes")
	require.Contains(t, notice, "on version 1")
	await(t, p, "the edit shown", jsonTextJS, func(s string) bool { return strings.Contains(s, `"timeout": 900`) })
	p.screenshot(t, "builder-draft-restored", "approval reloaded mid-edit: the notice says the unsaved changes were restored, the JSON tab shows timeout 900")

	// Back to another page, then Forward again: the edit is still there.
	p.do(t, "go to the waits", `(() => { location.hash = '#/waits'; return true; })()`)
	await(t, p, "the waits page", `!!document.getElementById('waiting-result')`, func(b bool) bool { return b })
	p.do(t, "back", `(() => { history.back(); return true; })()`)
	await(t, p, "the builder again, with the edit", jsonTextJS, func(s string) bool { return strings.Contains(s, `"timeout": 900`) })
	p.do(t, "forward", `(() => { history.forward(); return true; })()`)
	await(t, p, "the waits page", `!!document.getElementById('waiting-result')`, func(b bool) bool { return b })
	p.do(t, "back", `(() => { history.back(); return true; })()`)
	await(t, p, "the builder again, with the edit", jsonTextJS, func(s string) bool { return strings.Contains(s, `"timeout": 900`) })

	p.click(t, "#builder-discard")
	await(t, p, "the stored version back", jsonTextJS, func(s string) bool { return strings.Contains(s, `"timeout": 600`) })
	asked, err = eval[bool](p, leaveAskedJS)
	require.NoError(t, err)
	require.False(t, asked, "nothing to lose once discarded")
	p.reload(t)
	awaitBuilder(t, p, "approval opened", func(s builderState) bool { return s.Version == 1 && s.Check == "valid" })
	gone, err := eval[bool](p, `!document.getElementById('builder-draft')`)
	require.NoError(t, err)
	require.True(t, gone, "a discarded draft is not restored")

	// A new workflow, never stored, survives a reload too.
	p.navigate(t, j.base+"/ui/#/builder")
	awaitBuilder(t, p, "a new workflow", func(s builderState) bool { return s.Version == 0 && s.Panel == "definition" })
	p.click(t, "#tab-json")
	p.set(t, "#builder-json", `{"name": "journey-draft", "nodes": [{"id": "pause", "type": "wait", "data": {"for": "5m"}}]}`)
	awaitBuilder(t, p, "the new workflow checked", func(s builderState) bool { return s.Check == "valid" && s.Nodes["pause"] == 0 })
	p.reload(t)
	await(t, p, "the new workflow restored", jsonTextJS, func(s string) bool { return strings.Contains(s, `"journey-draft"`) })
	notice, err = eval[string](p, `(document.getElementById('builder-draft') || {}).textContent || ''`)
	require.NoError(t, err)
	require.Contains(t, notice, "Restored the unsaved changes")
	p.click(t, "#builder-discard")
	await(t, p, "the new workflow discarded", jsonTextJS, func(s string) bool { return strings.Contains(s, `"new-workflow"`) })
}

// sendEventSaysWhoTakesIt: on an approval, the type field offers the type its wait
// expects and says who takes it, or that nothing waits for another type and it will be
// buffered, which the answer then says too (not as done). On a shipment waiting for a
// callback and a Kafka record, the page shows the curl and kcat commands with the ids
// filled in; the callback sent as the page says is taken.
func sendEventSaysWhoTakesIt(t *testing.T, p *page, j *journey) {
	approval := j.start(t, "approval", map[string]any{"order": "A-2001"})
	p.navigate(t, j.base+"/ui/#/executions/"+approval)
	offered := await(t, p, "the types offered", `[...document.querySelectorAll('#send-types option')].map((o) => o.value)`,
		func(v []string) bool { return len(v) > 0 })
	require.Equal(t, []string{"approved"}, offered)
	const takersJS = `(() => { const n = document.getElementById('send-takers'); return n ? n.dataset.state + ' ' + n.textContent : ''; })()`
	p.fill(t, "#send-type", "approved")
	require.Equal(t, "taken Taken by approval as approval.", await(t, p, "who takes approved", takersJS, func(s string) bool { return strings.HasPrefix(s, "taken") }))
	p.fill(t, "#send-type", "api_response")
	said := await(t, p, "nothing takes api_response", takersJS, func(s string) bool { return strings.HasPrefix(s, "buffered") })
	require.Contains(t, said, "Nothing waits for this type — it will be buffered for 24h")
	p.click(t, `button[data-action="send-event"]`)
	require.Contains(t, p.confirm(t), "waits for api_response now: it will be buffered for 24h")
	v := awaitExec(t, p, "the answer", func(v execPage) bool { return v.Answer != nil })
	require.Equal(t, "buffered", v.Answer.Outcome, "a buffered event is not shown as done")
	require.Contains(t, v.Answer.Text, "Send event: buffered, not taken (202)")
	require.Contains(t, v.Answer.Text, "nothing waits for this type")
	p.screenshot(t, "send-event-buffered", "an event no wait takes: the field said so before, and the answer says buffered, not taken")

	shipment := j.start(t, "shipment", map[string]any{"order": "A-2002", "amount": 15})
	call := j.nextCall(t)
	corr := call["correlation_id"].(string)
	p.navigate(t, j.base+"/ui/#/executions/"+shipment)
	type command struct {
		Source string `json:"source"`
		Event  string `json:"event"`
		URL    string `json:"url"`
		Body   string `json:"body"`
		Topic  string `json:"topic"`
		Text   string `json:"text"`
	}
	cmds := await(t, p, "the delivery commands", `[...document.querySelectorAll('#send-commands .send-command')].map((c) => ({ source: c.dataset.source, event: c.dataset.event,
  url: c.dataset.url, body: c.dataset.body, topic: c.dataset.topic, text: c.querySelector('pre').textContent }))`, func(c []command) bool { return len(c) == 2 })
	require.Equal(t, "callback", cmds[0].Source)
	require.Equal(t, j.base+"/api/internal/callbacks/console", cmds[0].URL)
	require.Contains(t, cmds[0].Text, "curl -X POST '"+j.base+"/api/internal/callbacks/console'")
	require.Contains(t, cmds[0].Text, `"execution_id":"`+shipment+`"`)
	require.Contains(t, cmds[0].Text, `"correlation_id":"`+corr+`"`)
	require.Equal(t, "kafka", cmds[1].Source)
	require.Equal(t, `echo '{"execution_id":"`+shipment+`","correlation_id":"`+corr+`"}' | kcat -P -b "$KAFKA_BROKERS" -t 'journey.shipments'`, cmds[1].Text)
	p.screenshot(t, "send-event-commands", "a shipment waiting for its callback and Kafka record: the Send event form shows the curl and kcat commands with the ids filled in")

	// The callback as the page gives it is taken by the wait.
	req, err := http.NewRequest(http.MethodPost, cmds[0].URL, strings.NewReader(cmds[0].Body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	await(t, p, "the callback arrived; only the record's command is left", `[...document.querySelectorAll('#send-commands .send-command')].map((c) => c.dataset.event)`,
		func(v []string) bool { return len(v) == 1 && v[0] == "kafka_event" })
}

// executionsToldApart: each execution is listed with its business key (the shipment's
// display template; the approval's first input fields), found by it, and shown on its
// page; an execution id and a correlation id carry tags of their own.
func executionsToldApart(t *testing.T, p *page, j *journey) {
	p.viewport(t, widths[0])
	p.navigate(t, j.base+"/ui/#/executions")
	keys := await(t, p, "the keys listed", `Object.fromEntries([...document.querySelectorAll('#executions tbody tr')].map((tr) => [tr.dataset.executionId, (tr.querySelector('.summary') || {}).textContent || '']))`,
		func(m map[string]string) bool { return m[j.waiting] != "" })
	require.Equal(t, "A-1001 · 120 EUR", keys[j.waiting], "by the workflow's display template")
	require.Equal(t, "amount: 80 · order: A-1002", keys[j.failed], "by the input's first fields")
	require.Equal(t, "order: A-1003", keys[j.deadOwner])

	p.fill(t, "#filter-q", "a-1002")
	p.do(t, "search", `(() => { document.querySelector('form[role=search]').requestSubmit(); return true; })()`)
	found := await(t, p, "the search by key", `[...document.querySelectorAll('#executions tbody tr')].map((tr) => tr.dataset.executionId)`,
		func(ids []string) bool { return len(ids) == 1 })
	require.Equal(t, []string{j.failed}, found)
	note, err := eval[string](p, `document.getElementById('search-note').textContent`)
	require.NoError(t, err)
	require.Contains(t, note, "whose key contains “a-1002”")
	p.screenshot(t, "executions-by-key", "the executions found by business key a-1002: one row, its key shown beside its shortened, tagged id")

	p.navigate(t, j.base+"/ui/#/waits")
	waitKeys := await(t, p, "the waits' keys", `[...document.querySelectorAll('#waiting tbody tr')].map((tr) => tr.dataset.executionId + ' ' + ((tr.querySelector('.summary') || {}).textContent || ''))`,
		func(v []string) bool { return len(v) > 0 })
	require.Contains(t, waitKeys, j.waiting+" A-1001 · 120 EUR")

	p.navigate(t, j.base+"/ui/#/unmatched")
	tags := await(t, p, "the id tags", `(() => { const tr = [...document.querySelectorAll('#unmatched tbody tr')].find((r) => r.querySelector('[data-id-kind=correlation]'));
  return tr ? [...tr.querySelectorAll('[data-id-kind]')].map((w) => w.dataset.idKind + ' ' + w.querySelector('.id-tag').textContent) : null; })()`,
		func(v []string) bool { return v != nil })
	require.Equal(t, []string{"execution exec", "correlation corr"}, tags)

	p.navigate(t, j.base+"/ui/#/executions/"+j.waiting)
	key := await(t, p, "the key on the execution's page", `(document.getElementById('execution-summary') || {}).textContent || ''`, func(s string) bool { return s != "" })
	require.Equal(t, "A-1001 · 120 EUR", key)
}

// smallerThings: a timer node says it waits for its time; a cancelled node is drawn
// apart from a failed one; the workflow filter suggests the stored names; with the API
// out of reach a list keeps what it showed (dimmed) instead of an error; an unknown
// workflow in the builder offers a way on.
func smallerThings(t *testing.T, p *page, j *journey) {
	p.viewport(t, widths[1])
	timer := j.start(t, "cool-off", map[string]any{"order": "A-3001"})
	p.navigate(t, j.base+"/ui/#/executions/"+timer)
	label := await(t, p, "the timer node", `(() => { const n = document.querySelector('.graph .node[data-node-id="cool_off"]'); return n && n.dataset.nodeState === 'waiting_for_events' ? n.querySelector('.node-status').textContent : ''; })()`,
		func(s string) bool { return s != "" })
	require.Equal(t, "waiting (timer)", label)
	p.requireReachable(t, "a timer's execution", widths[1])

	// The cancelled execution's timer node: not drawn as a failure.
	p.navigate(t, j.base+"/ui/#/executions/"+j.deadOwner)
	type fills struct {
		Cancelled string `json:"cancelled"`
		Failed    string `json:"failed"`
	}
	f := await(t, p, "the cancelled node drawn", `(() => { const n = document.querySelector('.graph .node[data-node-state="cancelled"] rect'); return n ? { cancelled: getComputedStyle(n).stroke } : null; })()`,
		func(f *fills) bool { return f != nil })
	p.navigate(t, j.base+"/ui/#/executions/"+j.failed)
	failed := await(t, p, "the failed node drawn", `(() => { const n = document.querySelector('.graph .node[data-node-state="failed"] rect'); return n ? getComputedStyle(n).stroke : ''; })()`,
		func(s string) bool { return s != "" })
	require.NotEqual(t, failed, f.Cancelled, "a cancelled node is not coloured as a failed one")

	// The redrive's confirmation says what becomes of each failed node and of its call.
	p.click(t, `button[data-action="redrive"]`)
	said := await(t, p, "the redrive's confirmation", `(() => { const d = document.querySelector('dialog.confirm[open]'); return d ? d.textContent : ''; })()`,
		func(s string) bool { return s != "" })
	require.Contains(t, said, "approval: its wait reopens with fresh deadlines, keeping the events it recorded; it makes no call.")
	p.click(t, "dialog.confirm[open] [data-confirm=no]")

	// The workflow filter suggests the stored workflows.
	p.navigate(t, j.base+"/ui/#/waits")
	names := await(t, p, "the workflow names suggested", `[...document.querySelectorAll('#filter-workflow-names option')].map((o) => o.value)`,
		func(v []string) bool { return len(v) >= 3 })
	require.Subset(t, names, []string{"shipment", "approval", "cool-off"})

	// The API out of reach: the waits stay listed, dimmed, without an error in their place.
	await(t, p, "the waits listed", `document.querySelectorAll('#waiting tbody tr').length`, func(n int) bool { return n > 0 })
	p.block(t, j.base+"/api/*")
	await(t, p, "the page told the API is out of reach", `document.getElementById('api-status').dataset.state`, func(s string) bool { return s == "error" })
	type kept struct {
		Rows    int    `json:"rows"`
		Text    string `json:"text"`
		Dimmed  bool   `json:"dimmed"`
		Updated string `json:"updated"`
	}
	k, err := eval[kept](p, `({ rows: document.querySelectorAll('#waiting tbody tr').length, text: document.getElementById('view').textContent,
  dimmed: document.body.classList.contains('stale'), updated: document.getElementById('updated').textContent })`)
	require.NoError(t, err)
	require.Positive(t, k.Rows, "the last answer stays")
	require.NotContains(t, k.Text, "Failed to fetch")
	require.True(t, k.Dimmed, "and is dimmed")
	p.screenshot(t, "waits-api-lost", "the waits page with the API out of reach: the last answer kept and dimmed, the header saying so")
	p.block(t)
	await(t, p, "the API reachable again", `document.getElementById('api-status').dataset.state`, func(s string) bool { return s == "ok" })

	// An unknown workflow in the builder: its 404, and a way to a new or a stored one.
	p.navigate(t, j.base+"/ui/#/builder/no-such-workflow")
	way := await(t, p, "a way on", `(() => { const w = document.getElementById('builder-elsewhere'); return w ? [...w.querySelectorAll('a, option')].map((e) => e.getAttribute('href') || e.value) : null; })()`,
		func(v []string) bool { return len(v) > 3 })
	require.Contains(t, way, "#/builder")
	require.Contains(t, way, "shipment")
	require.Empty(t, p.axeFindings(t), "axe-core on the unknown workflow's page")
}
