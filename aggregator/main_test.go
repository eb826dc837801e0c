package aggregator_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: every Apply runs in
// the caller's goroutine, and every pool is closed in t.Cleanup, so nothing may outlive
// the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
