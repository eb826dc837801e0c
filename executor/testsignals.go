package executor

import (
	"github.com/rendezvous-run/rendezvous/internal/testsignal"
	"github.com/rendezvous-run/rendezvous/outbound"
)

// TestSignals are the internal steps of the executor's loops that a test may wait for
// exactly (Config.TestSignals); inert unless a test initialises them.
type TestSignals struct {
	// OutboxAttempted: one attempt of a correlated call is over and its outcome (sent,
	// retry later, given up) is written (the sender's outbound.Config.Attempted).
	OutboxAttempted testsignal.Signal[OutboxAttempt]
}

// OutboxAttempt is one attempt of a correlated call.
type OutboxAttempt = outbound.Attempt
