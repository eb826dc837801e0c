package console_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/server/console"
)

// newEcho returns an Echo with the view registered and the service's error handler, so
// that a 404 looks as it does in the service.
func newEcho(t *testing.T) *echo.Echo {
	t.Helper()
	e := echo.New()
	e.HTTPErrorHandler = problem.ErrorHandler(slog.New(slog.NewTextHandler(io.Discard, nil)))
	console.Register(e)
	return e
}

func get(t *testing.T, e *echo.Echo, target string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

// staticFiles lists the files under static/, which is what the package embeds.
func staticFiles(t *testing.T) []string {
	t.Helper()
	var names []string
	require.NoError(t, fs.WalkDir(os.DirFS("static"), ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, name)
		}
		return err
	}))
	require.NotEmpty(t, names)
	return names
}

func TestRegisterAddsExactlyTwoRoutes(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	var routes []string
	for _, r := range e.Routes() {
		routes = append(routes, r.Method+" "+r.Path)
	}
	slices.Sort(routes)
	require.Equal(t, []string{"GET /ui", "GET /ui/*"}, routes)
}

func TestBarePathRedirectsKeepingTheQuery(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	rec := get(t, e, "/ui", nil)
	require.Equal(t, http.StatusPermanentRedirect, rec.Code)
	require.Equal(t, "/ui/", rec.Header().Get("Location"))

	rec = get(t, e, "/ui?workflow=order", nil)
	require.Equal(t, http.StatusPermanentRedirect, rec.Code)
	require.Equal(t, "/ui/?workflow=order", rec.Header().Get("Location"))
}

func TestIndexIsServedWithItsHeaders(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	want, err := os.ReadFile("static/index.html")
	require.NoError(t, err)
	for _, target := range []string{"/ui/", "/ui/index.html"} {
		rec := get(t, e, target, nil)
		require.Equal(t, http.StatusOK, rec.Code, target)
		require.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"), target)
		require.Equal(t, string(want), rec.Body.String(), target)
		csp := rec.Header().Get("Content-Security-Policy")
		require.Equal(t, console.ContentSecurityPolicy, csp, target)
		require.Contains(t, csp, "default-src 'self'")
		require.NotContains(t, csp, "unsafe-inline")
		require.NotContains(t, csp, "unsafe-eval")
		require.Equal(t, "no-cache", rec.Header().Get("Cache-Control"), target)
		require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"), target)
		require.NotEmpty(t, rec.Header().Get("ETag"), target)
	}
}

// TestRevalidationAnswersNotModified: no-cache makes the browser ask again on every load;
// the ETag keeps that to a 304 until the binary changes.
func TestRevalidationAnswersNotModified(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	first := get(t, e, "/ui/app.js", nil)
	require.Equal(t, http.StatusOK, first.Code)
	etag := first.Header().Get("ETag")
	require.NotEmpty(t, etag)

	again := get(t, e, "/ui/app.js", map[string]string{"If-None-Match": etag})
	require.Equal(t, http.StatusNotModified, again.Code)
	require.Empty(t, again.Body.String())

	other := get(t, e, "/ui/app.js", map[string]string{"If-None-Match": `"not-this-one"`})
	require.Equal(t, http.StatusOK, other.Code)
	require.Equal(t, first.Body.String(), other.Body.String())
}

func TestEveryStaticFileIsServedWithItsType(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	types := map[string]string{
		".html": "text/html; charset=utf-8",
		".js":   "text/javascript; charset=utf-8",
		".css":  "text/css; charset=utf-8",
	}
	for _, name := range staticFiles(t) {
		want, err := os.ReadFile("static/" + name)
		require.NoError(t, err)
		rec := get(t, e, "/ui/"+name, nil)
		require.Equal(t, http.StatusOK, rec.Code, name)
		ct, ok := types[name[strings.LastIndex(name, "."):]]
		require.True(t, ok, "%s has an extension the test does not know", name)
		require.Equal(t, ct, rec.Header().Get("Content-Type"), name)
		require.Equal(t, console.ContentSecurityPolicy, rec.Header().Get("Content-Security-Policy"), name)
		require.Equal(t, string(want), rec.Body.String(), "%s is served as it is in static/", name)
	}
}

// TestIndexReferencesOnlyServedFiles: every script and stylesheet the page loads is one
// of the embedded files, by a relative URL.
func TestIndexReferencesOnlyServedFiles(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	index := get(t, e, "/ui/", nil).Body.String()
	refs := regexp.MustCompile(`(?i)\b(?:src|href)\s*=\s*"([^"]*)"`).FindAllStringSubmatch(index, -1)
	var loaded []string
	for _, m := range refs {
		loaded = append(loaded, m[1])
	}
	require.Subset(t, loaded, []string{"app.js", "style.css"})
	for _, ref := range loaded {
		if strings.HasPrefix(ref, "#") {
			continue // a page of the console, routed by the script
		}
		require.NotContains(t, ref, ":", "%s is not a relative URL", ref)
		require.False(t, strings.HasPrefix(ref, "/"), "%s is not relative to /ui/", ref)
		rec := get(t, e, "/ui/"+ref, nil)
		require.Equal(t, http.StatusOK, rec.Code, ref)
	}
}

func TestUnknownFilesAreNotFound(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	for _, target := range []string{
		"/ui/nope.js",
		"/ui/static/index.html", // the embed's directory is not part of the URL space
		"/ui/../go.mod",
		"/ui/%2e%2e/console.go",
		"/ui/index.html/",
		"/ui/console.go",
	} {
		rec := get(t, e, target, nil)
		require.Equal(t, http.StatusNotFound, rec.Code, target)
		require.Equal(t, problem.ContentType, rec.Header().Get("Content-Type"), target)
		var body map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), target)
		require.Equal(t, problem.TypeBaseURI+"not-found", body["type"], target)
	}
}

// libraryNames are the URLs the bundled libraries hold as names, never fetched: XML
// namespaces (React, SVG), JSON Schema dialect ids and a validator's base URI
// (@cfworker/json-schema), the links in React's and React Flow's error messages and
// React Flow's attribution (hidden), and the bare schemes a link sanitizer compares
// with (rjsf's markdown renderer).
var libraryNames = regexp.MustCompile(`https?://www\.w3\.org/[^"'` + "`" + `\s]*` +
	`|https://json-schema\.org/draft/[^"'\s]*|https://github\.com/cfworker[^"'\s]*` +
	`|https://react\.dev/errors/|https://(?:\$\{e\})?(?:react)?flow\.dev[^"'` + "`" + `\s]*` +
	`|"https?://"|` + "`http://\\$\\{")

// TestNoExternalResources: the view must work on a network that reaches only the
// service, so no file names another host — no CDN script, font, stylesheet or image.
// (The end-to-end tests also fail on any request the page makes to another origin.)
func TestNoExternalResources(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	external := []*regexp.Regexp{
		regexp.MustCompile(`(?i)\bhttps?://`),                         // any absolute http(s) URL
		regexp.MustCompile(`(?i)\b(?:src|href|action)\s*=\s*["']?//`), // protocol-relative URLs in markup
		regexp.MustCompile(`(?i)url\(\s*["']?(?:[a-z]+:)?//`),         // CSS url() to another host
		regexp.MustCompile(`(?i)@import`),                             // CSS imports
	}
	for _, name := range staticFiles(t) {
		body := get(t, e, "/ui/"+name, nil).Body.String()
		if strings.HasSuffix(name, ".js") {
			body = libraryNames.ReplaceAllString(body, "")
		}
		for _, re := range external {
			require.Empty(t, re.FindAllString(body, -1), "%s references another host (%s)", name, re)
		}
	}
}

// sourceFiles are the console's own scripts (web/src), which the bundle is built from.
func sourceFiles(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, fs.WalkDir(os.DirFS("web/src"), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(name, ".js") || strings.HasSuffix(name, ".jsx")) {
			return err
		}
		b, err := os.ReadFile("web/src/" + name)
		out[name] = string(b)
		return err
	}))
	require.NotEmpty(t, out)
	return out
}

// TestScriptNeverParsesDataAsHTML: the console's own code builds the page with
// textContent and setAttribute (and React, which does the same), so event payloads,
// names and definitions cannot inject markup; and the bundle generates no code at run
// time, which the CSP would refuse. (React's and the libraries' own innerHTML paths
// serve dangerouslySetInnerHTML and entity decoding, which the console never uses.)
func TestScriptNeverParsesDataAsHTML(t *testing.T) {
	t.Parallel()
	e := newEcho(t)
	for name, src := range sourceFiles(t) {
		for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "dangerouslySetInnerHTML", "eval(", "new Function", "enableMarkdownInDescription"} {
			require.False(t, strings.Contains(src, sink), "%s contains %s", name, sink)
		}
	}
	for _, name := range staticFiles(t) {
		if !strings.HasSuffix(name, ".js") {
			continue
		}
		js := get(t, e, "/ui/"+name, nil).Body.String()
		for _, sink := range []string{"eval(", "new Function"} {
			require.False(t, strings.Contains(js, sink), "%s contains %s", name, sink)
		}
	}
	html := get(t, e, "/ui/", nil).Body.String()
	require.NotRegexp(t, `<script>|<script\s+(?:[a-z-]+(?:="[^"]*")?\s*)*>[^<]`, html, "no inline script (the CSP would block it)")
	require.NotContains(t, html, "style=", "no inline style (the CSP would block it)")
}
