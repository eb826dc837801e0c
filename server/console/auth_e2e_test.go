package console_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
	"github.com/rendezvous-run/rendezvous/server/auth"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
)

const e2eBootstrap = "ui-e2e-bootstrap-token-0123456789abcdef"

// authView is what the page shows about its credential.
type authView struct {
	API       string `json:"api"`
	APIText   string `json:"apiText"`
	FormShown bool   `json:"formShown"`
	Why       string `json:"why"`
	Principal string `json:"principal"`
	Rows      int    `json:"rows"`
	Stored    string `json:"stored"`
	Cookie    string `json:"cookie"`
	Location  string `json:"location"`
}

const authJS = `(() => {
  const $ = (s) => document.querySelector(s);
  return {
    api: $('#api-status').dataset.state, apiText: $('#api-status').textContent,
    formShown: !$('#token-form').hidden, why: $('#token-why').textContent,
    principal: $('#principal').textContent, rows: document.querySelectorAll('#executions tbody tr').length,
    stored: sessionStorage.getItem('rendezvous.token') || '', cookie: document.cookie, location: location.href,
  };
})()`

func (p *page) awaitAuth(t *testing.T, what string, cond func(authView) bool) authView {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		v, err := chromedp.Run(ctx, chromedp.Evaluate[authView](authJS))
		cancel()
		if err == nil && cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within %s (err %v); the page showed %+v", what, stepTimeout, err, v)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// useToken types a token into the form and submits it, as a person does.
func (p *page) useToken(t *testing.T, token string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys("#token-input", token)))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click("#token-form button[type=submit]", chromedp.NodeVisible)))
}

func apiCall(t *testing.T, token, method, url string, body any) map[string]any {
	t.Helper()
	r := testkit.Do(t, method, url, body, testkit.Bearer(token))
	require.Less(t, r.Status, 300, "%s %s: %s", method, url, r.Raw)
	require.NotNil(t, r.JSON, "%s %s: %s", method, url, r.Raw)
	return r.JSON
}

// startAuthService runs a service with authentication on, whose bootstrap token is
// e2eBootstrap, and returns its base URL and a function that creates a token.
func startAuthService(t *testing.T) (string, func(name string, role auth.Role) string) {
	t.Helper()
	cfg := replica.Config(t, dbtest.NewSchema(t).URL, "ui-auth")
	cfg.Auth = auth.Config{BootstrapToken: e2eBootstrap}
	cfg.DBMaxConns = 4
	cfg.Executor.PollInterval = 50 * time.Millisecond
	svc := replica.Start(t, cfg)
	base := "http://" + svc.Addr()
	return base, func(name string, role auth.Role) string {
		return apiCall(t, e2eBootstrap, "POST", base+"/api/v1/tokens", map[string]any{"name": name, "role": role})["token"].(string)
	}
}

// TestWebViewAsksForAToken: against a service with authentication on, the view asks for
// a token, says when the token's role may not read, keeps the token in the tab's
// session storage only (no cookie, not in the address), and shows the executions with a
// viewer token, naming who it reads as.
func TestWebViewAsksForAToken(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	base, token := startAuthService(t)
	viewer, sender := token("ops-viewer", auth.RoleViewer), token("events-only", auth.RoleSender)
	apiCall(t, e2eBootstrap, "PUT", base+"/api/v1/workflows/approve", map[string]any{"name": "approve", "nodes": []any{
		map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
			"events": []any{map[string]any{"name": "approved", "source": "send", "type": "approved"}}, "timeout": 600}}}})
	apiCall(t, e2eBootstrap, "POST", base+"/api/v1/workflows/approve/executions", map[string]any{"input": map[string]any{}})

	bctx, bcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(bcancel)
	p := openBrowser(t, bctx, chromium, base)
	navCtx, navCancel := context.WithTimeout(p.ctx, stepTimeout)
	_, err := chromedp.Run(navCtx, chromedp.NavigateResponse(base+"/ui/"))
	navCancel()
	require.NoError(t, err)

	v := p.awaitAuth(t, "the token form, without a token", func(v authView) bool { return v.FormShown && v.API == "error" })
	require.Contains(t, v.APIText, "Sign in")
	require.Zero(t, v.Rows)

	p.useToken(t, sender)
	v = p.awaitAuth(t, "the sender's token refused for reading", func(v authView) bool {
		return v.FormShown && strings.Contains(v.Why, "may not read") && strings.Contains(v.Principal, "(sender)")
	})
	require.Zero(t, v.Rows)
	p.screenshot(t, "token-refused", "a sender's token given to the console: the header names token:events-only (sender) and says it may not read; the form asks for a viewer, operator or admin token; the page is empty")

	ctx2, cancel2 := context.WithTimeout(p.ctx, 5*time.Second)
	require.NoError(t, chromedp.Do(ctx2, chromedp.Click("#forget-token", chromedp.NodeVisible)))
	cancel2()
	p.awaitAuth(t, "the token forgotten", func(v authView) bool { return v.FormShown && v.Stored == "" && v.Principal == "" })

	p.useToken(t, viewer)
	v = p.awaitAuth(t, "the executions, read with the viewer's token", func(v authView) bool {
		return !v.FormShown && v.API == "ok" && v.Rows == 1
	})
	require.Equal(t, "as token:ops-viewer (viewer)", v.Principal)
	require.Equal(t, viewer, v.Stored, "kept in the tab's session storage")
	require.Empty(t, v.Cookie, "never in a cookie")
	require.NotContains(t, v.Location, viewer, "never in the address")
	require.Equal(t, base+"/ui/", v.Location)

	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.problems, "script errors or CSP violations")
	require.Empty(t, p.foreign, fmt.Sprintf("requests to other origins: %v", p.foreign))
}

// builderRole is what the builder offers the token's role.
type builderRole struct {
	Drawn          bool   `json:"drawn"`
	Editable       string `json:"editable"`
	Palette        bool   `json:"palette"`
	Save           bool   `json:"save"`
	Start          bool   `json:"start"`
	DisabledFields bool   `json:"disabledFields"`
}

const builderRoleJS = `(() => {
  const $ = (s) => document.querySelector(s), b = $('.builder');
  const fields = [...document.querySelectorAll('.builder-side input, .builder-side select, .builder-side textarea')];
  return { drawn: Boolean(b && $('.rdv-node[data-node-id=wait]')), editable: b ? b.dataset.editable : '',
    palette: Boolean($('.builder-palette')), save: Boolean($('#builder-save')), start: Boolean($('#builder-start')),
    disabledFields: fields.length > 0 && fields.every((f) => f.disabled || f.readOnly) };
})()`

// TestConsoleOffersActionsByRole: the actions an execution's page offers, and the
// builder's authoring, follow the role whoami names. A viewer reads the waiting
// execution, its graph and its wait, without a single action; the same page read with an
// operator's token offers the execution's and the wait's actions, and the builder shows
// the workflow read-only with Start; with an admin's token the builder may author it.
func TestConsoleOffersActionsByRole(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	base, token := startAuthService(t)
	viewer, operator := token("ops-viewer", auth.RoleViewer), token("ops-operator", auth.RoleOperator)
	apiCall(t, e2eBootstrap, "PUT", base+"/api/v1/workflows/approve", map[string]any{"name": "approve", "nodes": []any{
		map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
			"events": []any{map[string]any{"name": "approved", "source": "send", "type": "approved"}}, "timeout": 600}}}})
	id := apiCall(t, e2eBootstrap, "POST", base+"/api/v1/workflows/approve/executions", map[string]any{"input": map[string]any{}})["id"].(string)

	bctx, bcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(bcancel)
	p := openBrowser(t, bctx, chromium, base)
	p.navigate(t, base+"/ui/#/executions/"+id)
	p.awaitAuth(t, "the token form", func(v authView) bool { return v.FormShown })
	p.useToken(t, viewer)
	v := awaitExec(t, p, "the execution read by a viewer", func(v execPage) bool {
		return v.ID == id && v.Nodes["wait"].Spinning && v.Wait != nil && v.Wait.Status == "waiting"
	})
	require.Equal(t, "wait", v.Selected)
	require.Empty(t, v.Actions, "a viewer is offered no action")
	buttons, err := eval[int](p, `[...document.querySelectorAll('button.action')].filter((b) => b.offsetParent !== null).length`)
	require.NoError(t, err)
	require.Zero(t, buttons, "no action button is visible to a viewer")
	who, err := eval[string](p, `document.getElementById('principal').textContent`)
	require.NoError(t, err)
	require.Equal(t, "as token:ops-viewer (viewer)", who)
	p.screenshot(t, "viewer", "an execution's page read with a viewer token: the graph and the wait, the header naming token:ops-viewer (viewer), and no action")

	p.click(t, "#forget-token")
	p.awaitAuth(t, "the token forgotten", func(v authView) bool { return v.FormShown && v.Stored == "" })
	p.useToken(t, operator)
	v = awaitExec(t, p, "the execution read by an operator", func(v execPage) bool { return v.ID == id && len(v.Actions) > 0 })
	require.ElementsMatch(t, []string{"cancel-execution", "send-event", "cancel-wait-continue", "cancel-wait-fail"}, v.Actions)

	// The builder: an operator may start the stored workflow but not store definitions,
	// so it sees the workflow read-only; an admin (the bootstrap token) may author it.
	p.navigate(t, base+"/ui/#/builder/approve")
	b := await(t, p, "the builder read-only for an operator", builderRoleJS, func(b builderRole) bool { return b.Drawn })
	require.Equal(t, builderRole{Drawn: true, Editable: "false", Start: true, DisabledFields: true}, b)
	p.screenshot(t, "builder-operator", "the builder for an operator: approve drawn, no palette and no Save, the panel's fields disabled, Start execution offered")
	p.click(t, "#forget-token")
	p.awaitAuth(t, "the token forgotten", func(v authView) bool { return v.FormShown && v.Stored == "" })
	p.useToken(t, e2eBootstrap)
	b = await(t, p, "the builder editable for an admin", builderRoleJS, func(b builderRole) bool { return b.Drawn && b.Editable == "true" })
	require.Equal(t, builderRole{Drawn: true, Editable: "true", Palette: true, Save: true, Start: true}, b)

	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.problems, "script errors or CSP violations")
	require.Empty(t, p.foreign, fmt.Sprintf("requests to other origins: %v", p.foreign))
}
