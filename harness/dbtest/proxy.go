package dbtest

import (
	"testing"

	"github.com/rendezvous-run/rendezvous/harness/pgproxy"
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

// ProxiedSchema makes a fresh schema (NewSchema) and a proxy in front of its server: the
// schema, the URL that reaches it through the proxy, and the proxy, which the test cuts
// to take the database away from whatever connects through it.
func ProxiedSchema(tb testing.TB) (schema Schema, proxied string, proxy *pgproxy.Proxy) {
	tb.Helper()
	schema = NewSchema(tb)
	target, err := pgproxy.HostPort(schema.URL)
	if err != nil {
		tb.Fatal(err)
	}
	proxy = StartProxy(tb, target)
	return schema, pgproxy.ProxiedURL(schema.URL, proxy.Addr()), proxy
}
