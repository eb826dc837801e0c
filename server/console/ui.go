// Package ui serves the operator's web console at /ui/: lists of executions (found by
// workflow, status, creation time, id or correlation id), waits (waiting and scheduled
// timers), unmatched events and dead letters; and a page per execution with its
// workflow's graph coloured by node state, each wait's events and deadlines, the
// execution's timeline, the unmatched events that named it, and the actions the API
// offers on it.
//
// The console is JavaScript built from web/ (npm dependencies pinned by its lockfile,
// bundled by esbuild; `make ui`) into static/, which is committed and embedded, so `go
// build` alone gives a working binary and `make verify` fails when static/ is not what
// web/ builds. It reads and acts through nothing but the public HTTP API (/api/v1),
// which it polls: what it shows is what the API answers, and the API's tests cover the
// data, the page only its presentation. The Content-Security-Policy allows only the
// service's own origin, and the script builds the page with DOM calls and textContent
// only, so text from the database can never become markup or script.
//
// The package does not own the API, authentication or the service's routing; it adds
// two routes (Register) to the service's Echo.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rendezvous-run/rendezvous/internal/problem"
)

// Paths of the view.
const (
	// Prefix is where the view is served; Prefix without its slash redirects to it.
	Prefix = "/ui/"
	index  = "index.html"
)

// ContentSecurityPolicy is sent with every file: scripts, styles, fetches and images
// from the service's own origin only (no inline script or style, no CDN), no plugins,
// no <base> rewriting, no form posts, and no framing by other sites.
const ContentSecurityPolicy = "default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed static
var staticFS embed.FS

// contentTypes maps the extensions the view uses to their media types. The table is
// explicit rather than mime.TypeByExtension, whose answers depend on the host's
// mime.types files: a wrong type for a script breaks the page under nosniff.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

// file is one embedded file, ready to serve.
type file struct {
	name        string
	content     []byte
	contentType string
	etag        string
}

// files are the embedded files by name, read once: they cannot change while the process
// runs.
var files = mustLoad()

func mustLoad() map[string]*file {
	out, err := load(staticFS)
	if err != nil {
		panic(err) // a broken embed is a build defect, not a runtime condition
	}
	return out
}

func load(fsys fs.FS) (map[string]*file, error) {
	sub, err := fs.Sub(fsys, "static")
	if err != nil {
		return nil, fmt.Errorf("ui: open embedded files: %w", err)
	}
	out := map[string]*file{}
	err = fs.WalkDir(sub, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ct, ok := contentTypes[path.Ext(name)]
		if !ok {
			return fmt.Errorf("ui: embedded file %s has no known content type", name)
		}
		content, err := fs.ReadFile(sub, name)
		if err != nil {
			return fmt.Errorf("ui: read embedded %s: %w", name, err)
		}
		sum := sha256.Sum256(content)
		out[name] = &file{name: name, content: content, contentType: ct, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out[index] == nil {
		return nil, fmt.Errorf("ui: embedded files lack %s", index)
	}
	return out, nil
}

// Register adds the view's two routes to e: GET /ui redirects to /ui/, and GET /ui/*
// serves the embedded files (/ui/ is index.html; an unknown name is a 404 problem).
func Register(e *echo.Echo) {
	e.GET(strings.TrimSuffix(Prefix, "/"), redirect)
	e.GET(Prefix+"*", serve)
}

// redirect sends /ui to /ui/ so that the page's relative URLs resolve under it. 308
// keeps the method, and the query is kept too.
func redirect(c echo.Context) error {
	to := Prefix
	if q := c.Request().URL.RawQuery; q != "" {
		to += "?" + q
	}
	return c.Redirect(http.StatusPermanentRedirect, to)
}

func serve(c echo.Context) error {
	name := c.Param("*")
	if name == "" {
		name = index
	}
	f := files[name]
	if f == nil {
		// Names are looked up verbatim in a fixed table, so "..", encoded slashes and
		// directories can only miss; nothing outside the embedded files is reachable.
		return problem.New(http.StatusNotFound, "the web view has no file "+name).WithType("not-found")
	}
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, f.contentType)
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set(echo.HeaderXContentTypeOptions, "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// no-cache means "revalidate before use", not "do not store": the ETag turns a
	// reload into a 304, and a new release is seen at once because the files have no
	// versioned names that a long max-age would need.
	h.Set(echo.HeaderCacheControl, "no-cache")
	h.Set("ETag", f.etag)
	// ServeContent answers If-None-Match with 304 and handles Range; a zero modtime
	// sends no Last-Modified, since embedded files have none.
	http.ServeContent(c.Response(), c.Request(), f.name, time.Time{}, bytes.NewReader(f.content))
	return nil
}
