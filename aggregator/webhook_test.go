package aggregator_test

import (
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestBindWebhookID: a webhook-id binds to the first wait and event it names, also when
// many deliveries of it race, and never moves; the janitor deletes bindings older than
// UnmatchedMaxAge only.
func TestBindWebhookID(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()

	// 16 goroutines deliver one webhook-id, each naming a wait of its own: exactly one
	// wins it, and every one of them agrees on which.
	const racers = 16
	execs, corrs := make([]uuid.UUID, racers), make([]uuid.UUID, racers)
	same := make([]bool, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		execs[i], corrs[i] = uuid.New(), uuid.New()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			same[i], errs[i] = f.agg.BindWebhookID(ctx, "msg_race", execs[i], corrs[i], "api_response")
		}()
	}
	close(start)
	wg.Wait()
	winners := 0
	for i := range racers {
		require.NoError(t, errs[i])
		if same[i] {
			winners++
			again, err := f.agg.BindWebhookID(ctx, "msg_race", execs[i], corrs[i], "api_response")
			require.NoError(t, err)
			require.True(t, again, "a redelivery to the same wait and event agrees")
		}
	}
	require.Equal(t, 1, winners)

	exec, corr := uuid.New(), uuid.New()
	for _, c := range []struct {
		corr uuid.UUID
		name string
		same bool
	}{
		{corr, "approval", true},
		{uuid.New(), "approval", false}, // same execution, another wait
		{corr, "review", false},         // same wait, another event
		{corr, "approval", true},
	} {
		ok, err := f.agg.BindWebhookID(ctx, "msg_pair", exec, c.corr, c.name)
		require.NoError(t, err)
		require.Equal(t, c.same, ok, "%s %s", c.corr, c.name)
	}

	// Bindings past UnmatchedMaxAge (7 days by default) go; younger ones stay, and hold.
	_, err := f.pool.Exec(ctx, `INSERT INTO callback_webhook_ids (webhook_id, execution_id, correlation_id, event_name, created_at)
		VALUES ('msg_old', $1, $2, 'api_response', now() - interval '8 days'),
		       ('msg_week', $1, $2, 'api_response', now() - interval '6 days')`, exec, corr)
	require.NoError(t, err)
	_, err = f.agg.Janitor(ctx)
	require.NoError(t, err)
	var ids []string
	rows, err := f.pool.Query(ctx, `SELECT webhook_id FROM callback_webhook_ids ORDER BY webhook_id`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"msg_pair", "msg_race", "msg_week"}, ids)
	ok, err := f.agg.BindWebhookID(ctx, "msg_week", exec, uuid.New(), "api_response")
	require.NoError(t, err)
	require.False(t, ok, "a binding does not expire before the janitor deletes it")
}
