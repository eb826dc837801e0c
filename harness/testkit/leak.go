package testkit

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// VerifyTestMain is the TestMain of every package whose tests start goroutines (every
// package that starts a service, a pool, an HTTP server or a Kafka client): it runs the
// tests and then fails the package when any goroutine is left behind, so that a loop
// that outlives its Stop, or a connection nobody closed, is found where it was made.
// Each leak is fixed where it starts, not ignored here. after, if any, runs last, before
// the process exits (removing what the package's tests shared, say). Before the tests
// run, the package takes its share of the PostgreSQL server (see NeedsWholeServer).
//
//	func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }
func VerifyTestMain(m *testing.M, after ...func()) {
	release, err := takeSlots()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		release()
		for _, f := range after {
			f()
		}
		os.Exit(code)
	}))
}
