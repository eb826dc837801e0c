package server_test

import (
	"testing"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
)

func TestMain(m *testing.M) {
	// Tests of several replicas on one database run side by side: the server is theirs.
	testkit.NeedsWholeServer()
	testkit.VerifyTestMain(m)
}
