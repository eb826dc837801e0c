package ui_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the service, the
// broker and the browser are all stopped in t.Cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
