package lists_test

import (
	"testing"

	"github.com/rendezvous-run/rendezvous/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }
