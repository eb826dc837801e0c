package aggregator

import (
	"context"
	"fmt"
	"time"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/startstop"
)

// Defaults of the replica's heartbeat and of stale waits.
const (
	// HeartbeatIntervalDefault: a replica's row is at most this old while it runs, so an
	// age of four intervals (the alert's threshold, a minute) is a replica that stopped.
	HeartbeatIntervalDefault = 15 * time.Second
	// StaleWaitAfterDefault: an event wait open an hour without any event is worth a look.
	StaleWaitAfterDefault = time.Hour
	// heartbeatForget is how long the row of a replica that stopped without saying so is
	// kept (and its age exported, and alerted on) before the heartbeat rounds prune it.
	heartbeatForget = time.Hour
)

// heartbeatService is the replica's heartbeat loop. Its Start writes the first beat
// before the loop runs, so a replica that has started has announced itself (a failure
// is logged and retried by the loop, never a reason not to start); the loop writes one
// every HeartbeatInterval and, when it ends, deletes the row: a replica that stops in
// order is gone, not silent. Each round also forgets replicas silent for over an hour.
type heartbeatService struct {
	*startstop.Loop
	a       *Aggregator
	started time.Time
}

func (a *Aggregator) heartbeatService() startstop.Service {
	h := &heartbeatService{a: a}
	h.Loop = startstop.NewLoop("replica heartbeat", h.run)
	return h
}

// Start implements startstop.Service.
func (h *heartbeatService) Start(ctx context.Context) error {
	h.started = h.a.now().UTC()
	h.beat(ctx)
	return h.Loop.Start(ctx)
}

func (h *heartbeatService) beat(ctx context.Context) {
	if err := h.a.Heartbeat(ctx, h.started); err != nil && ctx.Err() == nil {
		h.a.DatabaseError(ctx)
		h.a.logger.WarnContext(ctx, "heartbeat failed; retrying", "err", err, "instance_id", h.a.cfg.InstanceID)
	}
}

func (h *heartbeatService) run(ctx context.Context) {
	startstop.Every(h.a.cfg.HeartbeatInterval, h.a.cfg.HeartbeatInterval, h.beat)(ctx)
	// ctx has ended: the delete gets a moment of its own.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := h.a.q.ReplicaHeartbeatDelete(dctx, h.a.pool, h.a.cfg.InstanceID); err != nil {
		h.a.logger.WarnContext(dctx, "could not remove the heartbeat at shutdown; it will age and be pruned", "err", err, "instance_id", h.a.cfg.InstanceID)
	}
}

// Heartbeat runs one round of RunHeartbeat: this replica's row written, replicas silent
// for over an hour forgotten.
func (a *Aggregator) Heartbeat(ctx context.Context, started time.Time) error {
	now := a.now().UTC()
	if err := a.q.ReplicaHeartbeatBeat(ctx, a.pool, dbsqlc.ReplicaHeartbeatBeatParams{InstanceID: a.cfg.InstanceID, StartedAt: started, Now: now}); err != nil {
		return fmt.Errorf("write heartbeat: %w", err)
	}
	if _, err := a.q.ReplicaHeartbeatPrune(ctx, a.pool, now.Add(-heartbeatForget)); err != nil {
		return fmt.Errorf("prune heartbeats: %w", err)
	}
	return nil
}
