package aggregator

import (
	"time"

	"github.com/rendezvous-run/rendezvous/internal/testsignal"
)

// TestSignals are the internal steps of the aggregator's loops that a test may wait
// for exactly (Config.TestSignals); inert unless a test initialises them.
type TestSignals struct {
	// SweepRoundDone: the sweeper finished a round and goes to sleep until the time it
	// carries (or until a registration here wakes it earlier).
	SweepRoundDone testsignal.Signal[time.Time]
}
