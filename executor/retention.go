package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/startstop"
)

// Retention defaults.
const (
	RetentionDefault         = 7 * 24 * time.Hour
	RetentionIntervalDefault = time.Hour
	RetentionBatchDefault    = 500
)

// Purged reports what one retention pass deleted.
type Purged struct {
	Executions int64 `json:"executions"`
	Waits      int64 `json:"waits"`
	// Audit is the audit log's rows, kept as long as finished executions.
	Audit int64 `json:"audit"`
	// Skipped: another pod holds the retention lock and is purging.
	Skipped bool `json:"skipped"`
}

// runRetention purges every RetentionInterval until ctx ends.
func (e *Executor) runRetention(ctx context.Context) {
	if e.cfg.Retention < 0 {
		return
	}
	// The first pass a minute after start, not at once: a rolling restart would purge N
	// times.
	startstop.Every(time.Minute, e.cfg.RetentionInterval, func(ctx context.Context) {
		p, err := e.Purge(ctx, e.cfg.Clock.Now().Add(-e.cfg.Retention))
		switch {
		case err != nil && ctx.Err() == nil:
			e.logger.WarnContext(ctx, "retention pass failed", "instance_id", e.cfg.InstanceID, "err", err)
			e.databaseError(ctx)
		case !p.Skipped && p.Executions+p.Waits+p.Audit > 0:
			e.logger.InfoContext(ctx, "retention pass", "instance_id", e.cfg.InstanceID,
				"executions_deleted", p.Executions, "waits_deleted", p.Waits, "audit_rows_deleted", p.Audit)
		}
	})(ctx)
}

// Purge deletes executions that finished before cutoff (their nodes, waits, queued work
// and calls go with them) and finished waits, older than cutoff, of executions still
// running. Only one pod purges at a time (a session advisory lock); the others skip.
// Rows go RetentionBatch at a time, each batch its own short transaction that skips
// locked rows, so hot tables never see a long lock.
func (e *Executor) Purge(ctx context.Context, cutoff time.Time) (Purged, error) {
	var p Purged
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return p, err
	}
	defer conn.Release()
	locked, err := e.q.RetentionTryLock(ctx, conn)
	if err != nil {
		return p, fmt.Errorf("retention lock: %w", err)
	}
	if !locked {
		p.Skipped = true
		return p, nil
	}
	defer func() {
		if _, err := e.q.RetentionUnlock(context.WithoutCancel(ctx), conn); err != nil {
			// The lock lives as long as the session: close it rather than pool it locked.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	batch := int32(e.cfg.RetentionBatch)
	if p.Executions, err = drain(batch, func() (int64, error) {
		return e.q.ExecutionDeleteFinishedBefore(ctx, conn, dbsqlc.ExecutionDeleteFinishedBeforeParams{Cutoff: cutoff, Max: batch})
	}); err != nil {
		return p, fmt.Errorf("delete finished executions: %w", err)
	}
	if p.Waits, err = drain(batch, func() (int64, error) {
		return e.q.WaitStateDeleteFinishedBefore(ctx, conn, dbsqlc.WaitStateDeleteFinishedBeforeParams{Cutoff: cutoff, Max: batch})
	}); err != nil {
		return p, fmt.Errorf("delete finished waits: %w", err)
	}
	if p.Audit, err = audit.Purge(ctx, e.pool, cutoff, batch); err != nil {
		return p, err
	}
	return p, nil
}

// drain runs one batch delete until it deletes less than a full batch, and returns the
// total.
func drain(batch int32, deleteBatch func() (int64, error)) (int64, error) {
	var total int64
	for {
		n, err := deleteBatch()
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
	}
}
