package aggregator

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// TestLockedOfHandsOverAllOrNothing: a continuation takes its executions' rows from the
// caller only when every one of them is there, and then only those; otherwise it locks
// them all itself (nil).
func TestLockedOfHandsOverAllOrNothing(t *testing.T) {
	t.Parallel()
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	rows := []dbsqlc.Execution{{ID: a}, {ID: b}, {ID: c}}

	require.Equal(t, []dbsqlc.Execution{{ID: a}, {ID: c}}, lockedOf(rows, []uuid.UUID{c, a}),
		"the rows of the continued executions, not the others the caller locked")
	require.Equal(t, []dbsqlc.Execution{{ID: b}}, lockedOf(rows, []uuid.UUID{b, b}),
		"two waits of one execution: its row once")
	require.Nil(t, lockedOf(rows, []uuid.UUID{a, uuid.New()}), "one row missing: none is handed over")
	require.Nil(t, lockedOf(nil, []uuid.UUID{a}), "nothing locked before")
}
