package outbound_test

import (
	"testing"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }
