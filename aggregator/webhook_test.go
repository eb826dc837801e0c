package aggregator_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestBindWebhookID: a webhook-id binds to the first wait it names, also when many
// deliveries of it race; a binding past its expiry is replaced, and the janitor deletes
// expired ones only.
func TestBindWebhookID(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	later := time.Now().Add(time.Hour)

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
			same[i], errs[i] = f.agg.BindWebhookID(ctx, "msg_race", execs[i], corrs[i], later)
		}()
	}
	close(start)
	wg.Wait()
	winners := 0
	for i := range racers {
		require.NoError(t, errs[i])
		if same[i] {
			winners++
			again, err := f.agg.BindWebhookID(ctx, "msg_race", execs[i], corrs[i], later)
			require.NoError(t, err)
			require.True(t, again, "a redelivery to the same wait agrees")
		}
	}
	require.Equal(t, 1, winners)

	// Same execution, another correlation id: another wait.
	exec, corr := uuid.New(), uuid.New()
	ok, err := f.agg.BindWebhookID(ctx, "msg_pair", exec, corr, later)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = f.agg.BindWebhookID(ctx, "msg_pair", exec, uuid.New(), later)
	require.NoError(t, err)
	require.False(t, ok)

	// Expired bindings are replaced, and pruned; live ones stay.
	ok, err = f.agg.BindWebhookID(ctx, "msg_old", exec, corr, time.Now().Add(-time.Second))
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = f.agg.BindWebhookID(ctx, "msg_old", uuid.New(), uuid.New(), time.Now().Add(-time.Second))
	require.NoError(t, err)
	require.True(t, ok, "a binding whose tolerance has passed does not hold")
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
	require.Equal(t, []string{"msg_pair", "msg_race"}, ids)
}
