package aggregator_test

import (
	"testing"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
)

// TestMain fails the package when a test leaves a goroutine behind: every Apply runs in
// the caller's goroutine, and every pool is closed in t.Cleanup, so nothing may outlive
// the tests.
func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}
