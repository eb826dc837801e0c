package server

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRouteWithoutDecisionStopsTheStart: a route served without an entry in the access
// table is an error that names it (New returns it, so such a service never starts).
func TestRouteWithoutDecisionStopsTheStart(t *testing.T) {
	t.Parallel()
	require.NoError(t, checkRouteAccess([]string{"GET /healthz", "PUT /api/v1/workflows/:name"}))
	err := checkRouteAccess([]string{"GET /healthz", "POST /api/v1/executions/:id/pause", "DELETE /api/v1/workflows/:name"})
	require.ErrorContains(t, err, "DELETE /api/v1/workflows/:name")
	require.ErrorContains(t, err, "POST /api/v1/executions/:id/pause")
	require.ErrorContains(t, err, "server/access.go")
}
