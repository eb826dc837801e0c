package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// SchemasPrefix is where the JSON Schemas of workflow definitions are served:
// SchemasPrefix+"workflow.json" and the files it refers to.
const SchemasPrefix = "/schemas/"

// SchemaContentType is the media type of a JSON Schema document.
const SchemaContentType = "application/schema+json"

// schemaCacheControl lets clients reuse a schema for five minutes and then
// revalidate it with its ETag: a schema changes only with a release, and an
// editor should see a new release's schema soon after it is deployed.
const schemaCacheControl = "public, max-age=300"

// servedSchema is one schema file, ready to serve.
type servedSchema struct {
	content []byte
	etag    string
}

// servedSchemas are read once: the files are embedded and cannot change while
// the process runs.
var servedSchemas = func() map[string]servedSchema {
	out := map[string]servedSchema{}
	for _, name := range workflow.SchemaNames() {
		b, _ := workflow.Schema(name)
		sum := sha256.Sum256(b)
		out[name] = servedSchema{content: b, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
	}
	return out
}()

// RegisterSchemas adds GET /schemas/:name to e, serving the JSON Schemas
// (draft 2020-12) that validation itself uses (workflow.SchemaNames), so that
// an editor pointed at /schemas/workflow.json reports what PUT
// /api/v1/workflows/:name would. An unknown name is a 404 problem.
func RegisterSchemas(e *echo.Echo) {
	e.GET(SchemasPrefix+":name", serveSchema)
}

func serveSchema(c echo.Context) error {
	name := c.Param("name")
	s, ok := servedSchemas[name]
	if !ok {
		// Names are looked up verbatim, so nothing but the embedded files is
		// reachable.
		return problem.New(http.StatusNotFound, fmt.Sprintf("no JSON Schema is called %q (known: %s)",
			name, strings.Join(workflow.SchemaNames(), ", "))).WithType("not-found")
	}
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, SchemaContentType)
	h.Set(echo.HeaderCacheControl, schemaCacheControl)
	h.Set("ETag", s.etag)
	// Public documents without credentials: browser-based editors on other
	// origins may fetch them.
	h.Set(echo.HeaderAccessControlAllowOrigin, "*")
	h.Set(echo.HeaderXContentTypeOptions, "nosniff")
	// ServeContent answers If-None-Match with 304; a zero modtime sends no
	// Last-Modified, since embedded files have none.
	http.ServeContent(c.Response(), c.Request(), name, time.Time{}, bytes.NewReader(s.content))
	return nil
}
