package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBinariesLinkNoTestCode: the binaries people run link no test-only code — no test
// framework, no container library, no test kit — and the product binary links none of
// the harnesses either. A test helper imported by mistake from a product package fails
// here, not in production.
func TestBinariesLinkNoTestCode(t *testing.T) {
	t.Parallel()
	testOnly := []string{
		"testing", "github.com/stretchr/testify", "github.com/testcontainers/testcontainers-go",
		"go.uber.org/goleak", "github.com/chromedp/chromedp", "github.com/rendezvous-run/rendezvous/harness/dbtest",
		// The shared test kit (and testkit/replica under it).
		"github.com/rendezvous-run/rendezvous/harness/testkit",
	}
	harnesses := []string{"github.com/rendezvous-run/rendezvous/harness/chaos", "github.com/rendezvous-run/rendezvous/harness/bench",
		// The peer the bench measures rendezvous against; the service never needs it.
		"github.com/dbos-inc"}
	for cmd, forbidden := range map[string][]string{
		"rendezvous":       slices.Concat(testOnly, harnesses),
		"rendezvous-chaos": testOnly,
		"rendezvous-bench": testOnly,
	} {
		out, err := exec.Command("go", "list", "-deps", "../"+cmd).CombinedOutput()
		require.NoError(t, err, string(out))
		for _, pkg := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if pkg == f || strings.HasPrefix(pkg, f+"/") {
					t.Errorf("cmd/%s links %s (%s)", cmd, pkg, f)
				}
			}
		}
	}
}
