package aggregator

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// webhookBindAttempts bounds how often BindWebhookID asks again after a concurrent
// binding of the same id it could not yet see.
const webhookBindAttempts = 3

// BindWebhookID records that the signed callback webhookID was delivered to the wait
// (executionID, correlationID), until expiresAt, and reports whether that agrees with
// what is recorded: false when the id was delivered to another wait before. Callbacks
// whose ids came in headers, which the signature does not cover, call it before
// applying, so a captured delivery cannot be replayed against another wait; retries of
// the delivery itself still bind to the same wait and apply as duplicates.
//
// The binding is committed on its own, before the event is applied: should applying
// fail, the sender's retry names the same wait and agrees with it.
func (a *Aggregator) BindWebhookID(ctx context.Context, webhookID string, executionID, correlationID uuid.UUID,
	expiresAt time.Time) (bool, error) {
	for range webhookBindAttempts {
		rows, err := a.q.WebhookIDBind(ctx, a.pool, dbsqlc.WebhookIDBindParams{
			WebhookID: webhookID, ExecutionID: executionID, CorrelationID: correlationID, ExpiresAt: expiresAt,
		})
		if err != nil {
			return false, fmt.Errorf("bind webhook-id: %w", err)
		}
		if len(rows) > 0 {
			return rows[0].ExecutionID == executionID && rows[0].CorrelationID == correlationID, nil
		}
	}
	return false, fmt.Errorf("bind webhook-id %q: no binding seen after %d attempts", webhookID, webhookBindAttempts)
}
