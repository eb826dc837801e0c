package aggregator

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// BindWebhookID records that the signed callback webhookID was delivered to the wait
// (executionID, correlationID) as event name, and reports whether that agrees with the
// binding recorded: false when the id was delivered before to another wait, or as
// another event.
//
// A signature covers the webhook-id and the body, not the id headers nor the event's
// name, so callbacks call it before applying: a captured delivery cannot be replayed
// against another wait, or as another event, by rewriting them; retries of the delivery
// itself agree and apply as duplicates. A binding never moves (a sender keeps the
// webhook-id across retries for as long as it retries); the janitor deletes it after
// UnmatchedMaxAge. It is committed on its own, before the event is applied: should
// applying fail, the sender's retry names the same wait and agrees with it.
func (a *Aggregator) BindWebhookID(ctx context.Context, webhookID string, executionID, correlationID uuid.UUID,
	name string) (bool, error) {
	b, err := a.q.WebhookIDBind(ctx, a.pool, dbsqlc.WebhookIDBindParams{
		WebhookID: webhookID, ExecutionID: executionID, CorrelationID: correlationID, EventName: name,
	})
	if err != nil {
		return false, fmt.Errorf("bind webhook-id: %w", err)
	}
	return b.ExecutionID == executionID && b.CorrelationID == correlationID && b.EventName == name, nil
}
