package dbtest

import (
	"testing"

	"github.com/rendezvous-run/rendezvous/internal/pgproxy"
)

// StartProxy starts a pgproxy in front of target (host:port) for a test: it fails the
// test on error and closes the proxy when the test ends.
func StartProxy(tb testing.TB, target string) *pgproxy.Proxy {
	tb.Helper()
	p, err := pgproxy.New(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}
