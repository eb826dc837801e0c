package api_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/server/api"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// schemaServer serves the schemas the way the service does, on plain Echo.
func schemaServer(t *testing.T) *httptest.Server {
	t.Helper()
	e := echo.New()
	e.HTTPErrorHandler = problem.ErrorHandler(nil)
	api.RegisterSchemas(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, body
}

func TestSchemasServed(t *testing.T) {
	t.Parallel()
	srv := schemaServer(t)
	names := workflow.SchemaNames()
	require.Subset(t, names, []string{"workflow.json", "wait_events.json", "http.json", "wait.json"})
	for _, name := range names {
		res, body := get(t, srv.URL+api.SchemasPrefix+name, nil)
		require.Equal(t, http.StatusOK, res.StatusCode, name)
		require.Equal(t, api.SchemaContentType, res.Header.Get("Content-Type"))
		require.Equal(t, "public, max-age=300", res.Header.Get("Cache-Control"))
		require.Equal(t, "*", res.Header.Get("Access-Control-Allow-Origin"))
		want, _ := workflow.Schema(name)
		require.Equal(t, want, body, name)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(body, &doc))
		require.NotContains(t, doc, "$id")

		etag := res.Header.Get("ETag")
		require.NotEmpty(t, etag)
		res, body = get(t, srv.URL+api.SchemasPrefix+name, http.Header{"If-None-Match": {etag}})
		require.Equal(t, http.StatusNotModified, res.StatusCode, "revalidation with the ETag")
		require.Empty(t, body)
	}
	// Distinct files have distinct ETags.
	a, _ := get(t, srv.URL+api.SchemasPrefix+"http.json", nil)
	b, _ := get(t, srv.URL+api.SchemasPrefix+"workflow.json", nil)
	require.NotEqual(t, a.Header.Get("ETag"), b.Header.Get("ETag"))
}

func TestSchemaNotFound(t *testing.T) {
	t.Parallel()
	srv := schemaServer(t)
	for _, path := range []string{"nope.json", "workflow", "..%2Fworkflow.go", "%2e%2e", "WORKFLOW.JSON"} {
		res, body := get(t, srv.URL+api.SchemasPrefix+path, nil)
		require.Equal(t, http.StatusNotFound, res.StatusCode, path)
		require.Equal(t, problem.ContentType, res.Header.Get("Content-Type"), path)
		var p map[string]any
		require.NoError(t, json.Unmarshal(body, &p), path)
		require.Equal(t, problem.TypeBaseURI+"not-found", p["type"], path)
		require.Equal(t, "Not Found", p["title"])
		require.EqualValues(t, http.StatusNotFound, p["status"])
		require.Contains(t, p["detail"], "no JSON Schema is called")
		require.Contains(t, p["detail"], "known: "+strings.Join(workflow.SchemaNames(), ", "))
		require.Empty(t, res.Header.Get("ETag"))
	}
	res, _ := get(t, srv.URL+"/schemas/", nil)
	require.Equal(t, http.StatusNotFound, res.StatusCode)
}

// serverLoader fetches schemas over HTTP from a running server only, as an
// editor does that was pointed at its /schemas/workflow.json: every relative
// $ref must resolve to a URL the server answers.
type serverLoader struct{ base string }

func (l serverLoader) Load(url string) (any, error) {
	if !strings.HasPrefix(url, l.base+api.SchemasPrefix) {
		return nil, fmt.Errorf("a $ref left the server: %s", url)
	}
	res, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, res.Status)
	}
	return jsonschema.UnmarshalJSON(res.Body)
}

// TestServedSchemasValidateDefinitions: the served files alone — fetched over
// HTTP, every $ref resolved through the server — accept the examples and
// reject what the service rejects, at the same place.
func TestServedSchemasValidateDefinitions(t *testing.T) {
	t.Parallel()
	srv := schemaServer(t)
	c := jsonschema.NewCompiler()
	c.UseLoader(serverLoader{base: srv.URL})
	sch, err := c.Compile(srv.URL + api.SchemasPrefix + "workflow.json")
	require.NoError(t, err)

	raw, err := os.ReadFile("../../examples/order-approval.json")
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(raw)))
	require.NoError(t, err)
	require.NoError(t, sch.Validate(doc))

	bad := `{"name": "x", "nodes": [{"id": "w", "type": "wait_events", "data": {"kafkaEvent": {"enabled": true}}}]}`
	_, err = workflow.Compile([]byte(bad), nil)
	var ve *workflow.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, []workflow.FieldError{{Path: "nodes[0].data.kafkaEvent.topic", Message: "required when enabled"}}, ve.Errors)

	doc, err = jsonschema.UnmarshalJSON(strings.NewReader(bad))
	require.NoError(t, err)
	err = sch.Validate(doc)
	var verr *jsonschema.ValidationError
	require.True(t, errors.As(err, &verr), "%v", err)
	var locations []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if req, ok := e.ErrorKind.(*kind.Required); ok {
			for _, p := range req.Missing {
				locations = append(locations, "/"+strings.Join(append(slices.Clone(e.InstanceLocation), p), "/"))
			}
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	require.Equal(t, []string{"/nodes/0/data/kafkaEvent/topic"}, locations)
}
