// Package replica starts a whole rendezvous replica (server) inside a test and
// stops it when the test ends: the one way tests run a service in process. It is apart
// from testkit because it links every product package, which testkit must not, so that
// those packages' own tests can use testkit. Test-only, like testkit.
package replica

import (
	"context"
	"sync"
	"testing"

	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/outbound"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/server/auth"
)

// Replica is a running server.
type Replica struct {
	*server.Service
	stop func()
}

// Config is a replica's configuration for a test on databaseURL: authentication off
// (server tests it; elsewhere it would only be in the way), a free loopback
// port, migrations applied, outbound requests allowed to loopback (where the test kit's
// fake service listens; the replica's own listeners stay refused), and the test kit's
// logger. Callers change what they test.
func Config(t testing.TB, databaseURL, instanceID string) server.Config {
	return server.Config{
		Auth:        auth.Config{Insecure: true},
		DatabaseURL: databaseURL, HTTPAddr: "127.0.0.1:0", InstanceID: instanceID, AutoMigrate: true,
		Executor: executor.Config{Outbound: outbound.ClientConfig{Allow: []string{"127.0.0.1"}}},
		Logger:   testkit.Logger(t),
	}
}

// Start runs a replica with cfg until Stop or the end of the test; an error from its
// Run fails the test.
func Start(t testing.TB, cfg server.Config) *Replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := server.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("replica %s: %v", cfg.InstanceID, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil {
			t.Errorf("replica %s: %v", cfg.InstanceID, err)
		}
	}()
	r := &Replica{Service: s, stop: sync.OnceFunc(func() { cancel(); <-done })}
	t.Cleanup(r.stop)
	return r
}

// Stop stops the replica as at shutdown and waits until it has; later calls do nothing.
func (r *Replica) Stop() { r.stop() }

// URL is the replica's base URL.
func (r *Replica) URL() string { return "http://" + r.Addr() }
