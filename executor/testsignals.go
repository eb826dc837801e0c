package executor

import (
	"github.com/google/uuid"

	"github.com/rendezvous-run/rendezvous/internal/testsignal"
)

// TestSignals are the internal steps of the executor's loops that a test may wait for
// exactly (Config.TestSignals); inert unless a test initialises them.
type TestSignals struct {
	// OutboxAttempted: one attempt of a correlated call is over and its outcome (sent,
	// retry later, given up) is written.
	OutboxAttempted testsignal.Signal[OutboxAttempt]
}

// OutboxAttempt is one attempt of a correlated call.
type OutboxAttempt struct {
	ExecutionID uuid.UUID
	NodeID      string
	Attempt     int32
	// Err is what kept the attempt from writing its outcome (nil when it did).
	Err error
}
