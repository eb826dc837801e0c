package executor

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
)

// notifier tells other replicas about committed work with NOTIFY, each in its own short
// transaction. Requests that arrive while one is being sent coalesce into the next, so
// a burst of commits costs a few notifications, and no committing transaction ever
// waits on PostgreSQL's notification lock.
func (e *Executor) notifier(ctx context.Context) {
	for {
		var ch string
		select {
		case <-ctx.Done():
			return
		case <-e.notifyRun:
			ch = db.ChannelRunQueue
		case <-e.notifyOutbox:
			ch = db.ChannelOutbox
		}
		if err := e.q.Notify(ctx, e.pool, ch); err != nil && ctx.Err() == nil {
			// Only a hint: the others still poll.
			e.logger.DebugContext(ctx, "notify failed", "channel", ch, "instance_id", e.cfg.InstanceID, "err", err)
		}
	}
}

// listen turns NOTIFYs into wake-ups. Losing the connection only delays work until the
// next poll, so it reconnects with backoff and pokes both loops after each reconnect.
func (e *Executor) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := e.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		e.logger.WarnContext(ctx, "notification listener lost its connection", "instance_id", e.cfg.InstanceID, "err", err, "retry_in", backoff)
		e.databaseError(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (e *Executor) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range []string{db.ChannelRunQueue, db.ChannelOutbox} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return err
		}
	}
	poke(e.wakeRun)
	poke(e.wakeOutbox)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case db.ChannelRunQueue:
			poke(e.wakeRun)
		case db.ChannelOutbox:
			poke(e.wakeOutbox)
		}
	}
}
