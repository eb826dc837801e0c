package aggregator

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// ApplyBatchFrom decides events from waits the caller read itself, as sendTxs hands over
// the open waits it read with its executions' locks; for the external tests.
func (a *Aggregator) ApplyBatchFrom(ctx context.Context, tx pgx.Tx, events []Event, rows []dbsqlc.ExecutionWaitState) ([]Result, error) {
	return a.applyBatch(ctx, tx, events, false, readBefore{waits: rows}, nil)
}
