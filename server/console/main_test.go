package console_test

import (
	"testing"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
)

// TestMain fails the package when a test leaves a goroutine behind: the service, the
// broker and the browser are all stopped in t.Cleanup.
func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}
