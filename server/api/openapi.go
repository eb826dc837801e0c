package api

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// OpenAPIPath is where the OpenAPI document is served.
const OpenAPIPath = "/openapi.json"

// OpenAPI is the OpenAPI 3.1 document of the service's whole HTTP surface: this API,
// the callback endpoint, the probes, the metrics, the JSON Schemas and the web view. It
// is written by hand and kept honest by tests that compare it with the routes the
// service registers and validate real responses against the schemas it declares.
//
//go:embed openapi.json
var OpenAPI []byte

func serveOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, OpenAPI)
}
