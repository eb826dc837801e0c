package aggregator

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
)

// grouper is a group commit: callers queue what they ask for; up to a number of them at
// a time lead, each committing one transaction for a group taken from the queue, until
// its own request is decided, then hand the lead to the oldest waiter not leading yet, so
// that no caller serves others for long. Under load N requests cost a few transactions;
// alone, a request costs what a single transaction costs.
type grouper[I, O any] struct {
	mu      sync.Mutex
	queue   []*member[I, O]
	leaders int
}

// member is one request waiting for its group's commit.
type member[I, O any] struct {
	ctx  context.Context
	in   I
	out  O
	err  error
	done chan struct{} // closed when out/err are set
	lead chan struct{} // closed when this caller must lead the next group
	// promoted is set, under grouper.mu, when lead is closed.
	promoted bool
}

// run queues in and returns what the commit of its group decided. At most leaders groups
// are in flight at once. take splits the queue into the next group and what stays queued,
// in order; commit decides a group, setting each member's out or err (run closes done).
func (g *grouper[I, O]) run(ctx context.Context, in I, leaders int,
	take func(queue []*member[I, O]) (group, rest []*member[I, O]), commit func(group []*member[I, O]),
) (O, error) {
	m := &member[I, O]{ctx: ctx, in: in, done: make(chan struct{}), lead: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, m)
	lead := g.leaders < leaders
	if lead {
		g.leaders++
	}
	g.mu.Unlock()
	if !lead {
		select {
		case <-m.lead:
		case <-m.done:
			// Decided by another leader; if the lead was handed to us meanwhile, it must
			// be handed on.
			g.mu.Lock()
			promoted := m.promoted
			g.mu.Unlock()
			if !promoted {
				return m.out, m.err
			}
		}
	}
	g.leadGroups(m, take, commit)
	<-m.done
	return m.out, m.err
}

// leadGroups commits queued groups until self is decided, then hands the lead on.
func (g *grouper[I, O]) leadGroups(self *member[I, O],
	take func(queue []*member[I, O]) (group, rest []*member[I, O]), commit func(group []*member[I, O]),
) {
	for {
		select {
		case <-self.done:
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, next := range g.queue {
				if !next.promoted {
					next.promoted = true
					close(next.lead)
					return
				}
			}
			g.leaders--
			return
		default:
		}
		g.mu.Lock()
		group, rest := take(g.queue)
		g.queue = rest
		g.mu.Unlock()
		if len(group) == 0 {
			<-self.done // in a group another leader is committing
			continue
		}
		commit(group)
		for _, m := range group {
			close(m.done)
		}
	}
}

// groupTimeout bounds one group commit, its retries included.
const groupTimeout = 30 * time.Second

// groupAttempts bounds retries of a group whose transaction hit a deadlock or
// serialization failure (concurrent batches touching the same waits).
const groupAttempts = 3

// groupContext is the context a group is committed on: its own, so that one caller
// giving up does not fail the others, carrying the first member's values (trace, audit
// principal) and bounded by groupTimeout.
func groupContext[I, O any](group []*member[I, O]) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(group[0].ctx), groupTimeout)
}

// groupTx runs fn in one transaction, again when it hits a deadlock or serialization
// failure, at most groupAttempts times. What fn queues on last is sent with the COMMIT
// (db.TxLast): a group's audit rows, known only once its members are decided, cost no
// round trip of their own. atCommit is where fn's continuations send their writes
// (continueEnded): last as well, so that continuing the executions costs no round trip
// and no savepoint either, until an attempt fails in a continuation; the group is then
// decided again with atCommit nil, under a savepoint, where the same failure queues the
// continuations instead of failing the group.
func (a *Aggregator) groupTx(ctx context.Context, fn func(tx pgx.Tx, last, atCommit *db.Pipeline) error) error {
	continueAtCommit := true
	for attempt := 1; ; attempt++ {
		err := db.TxLast(ctx, a.pool, func(tx pgx.Tx, last *db.Pipeline) error {
			atCommit := last
			if !continueAtCommit {
				atCommit = nil
			}
			return fn(tx, last, atCommit)
		})
		if continueAtCommit && continuedWithoutSavepoint(err) {
			if changedAhead(err) {
				// A race lost, not a failure: counted as the others are, and logged as they are.
				a.ins.conflicts.Add(ctx, 1)
				a.logger.DebugContext(ctx, "a wait changed between its read and its write; deciding the group again under a savepoint",
					"err", err, "instance_id", a.cfg.InstanceID)
			} else {
				a.logger.WarnContext(ctx, "a continuation failed without a savepoint; deciding the group again under one",
					"err", err, "instance_id", a.cfg.InstanceID)
			}
			continueAtCommit = false
			attempt--
			continue
		}
		if err == nil || !db.IsRetryable(err) || attempt == groupAttempts {
			return err
		}
	}
}
