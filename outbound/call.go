// Package outbound owns the requests rendezvous sends: the http node's, and above all a
// wait's outbound correlated call, whose whole lifecycle is here — queued as an outbox
// row in the transaction that registers its wait (Queue, so a reply can never beat its
// row), built from the node's apiCall (Build), sent by any replica (Sender, claiming
// rows with SKIP LOCKED), retried with backoff, and given up for good: the wait's
// strategy decides whether the wait can go on without the reply (Waits.FailCall), and
// the executor fails the node when it cannot (Executions.FailNode).
//
// Every request leaves through one Client per replica, which owns what may not be left
// to a definition: where a request may connect (the egress policy, judged in the dialer
// on the address DNS answered), the values of its secrets (put in as it leaves, kept out
// of everything stored), and whether its host is called at all (a circuit breaker per
// host). It does not own the definitions' templates (package template) nor the outbox's
// rows (db).
package outbound

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// Queue queues the correlated call of wait ws inside the transaction that registers (or
// reopens) the wait: the row commits with the wait, before any call leaves. The caller
// wakes the sender after its commit (Sender.Wake through the executor). Queuing a wait's
// call twice queues it once.
func Queue(ctx context.Context, q dbsqlc.DBTX, ws dbsqlc.ExecutionWaitState) error {
	if err := dbsqlc.New().OutboxInsert(ctx, q, dbsqlc.OutboxInsertParams{WaitStateID: ws.ID, ExecutionID: ws.ExecutionID, NodeID: ws.NodeID}); err != nil {
		return fmt.Errorf("queue api call: %w", err)
	}
	return nil
}

// Backoff returns the delay before attempt+1: exponential from lo, capped at hi, with
// full jitter so that many calls failing together do not retry together.
func Backoff(lo, hi time.Duration, attempt int32) time.Duration {
	d := lo << min(attempt-1, 20)
	if d <= 0 || d > hi {
		d = hi
	}
	return d/2 + rand.N(d/2+1)
}
