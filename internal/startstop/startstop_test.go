package startstop_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/testkit"

	"github.com/rendezvous-run/rendezvous/internal/startstop"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// TestLoop: Started is closed once the loop runs, Stop ends it and waits for it, a
// second Start is refused, and Stop on a loop never started does nothing.
func TestLoop(t *testing.T) {
	t.Parallel()
	var ran, returned atomic.Bool
	l := startstop.NewLoop("test", func(ctx context.Context) {
		ran.Store(true)
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // Stop must wait for this
		returned.Store(true)
	})
	require.Equal(t, "test", l.Name())
	l.Stop() // not started: nothing happens
	require.NoError(t, l.Start(t.Context()))
	<-l.Started()
	require.ErrorIs(t, l.Start(t.Context()), startstop.ErrStarted)
	require.Eventually(t, ran.Load, time.Second, time.Millisecond)
	l.Stop()
	require.True(t, returned.Load(), "Stop returned before the loop did")
	l.Stop() // twice: nothing happens
}

// TestLoopEndsWithItsContext: cancelling the context Start was given ends the loop too.
func TestLoopEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	l := startstop.NewLoop("ctx", func(ctx context.Context) { <-ctx.Done(); close(done) })
	require.NoError(t, l.Start(ctx))
	cancel()
	<-done
	l.Stop()
}

// TestEvery: the first round waits first, later rounds come every interval, and none
// runs after the context ends.
func TestEvery(t *testing.T) {
	t.Parallel()
	var rounds atomic.Int32
	began := time.Now()
	var firstAt atomic.Int64
	l := startstop.NewLoop("every", startstop.Every(50*time.Millisecond, 10*time.Millisecond, func(context.Context) {
		if rounds.Add(1) == 1 {
			firstAt.Store(int64(time.Since(began)))
		}
	}))
	require.NoError(t, l.Start(t.Context()))
	require.Eventually(t, func() bool { return rounds.Load() >= 3 }, 5*time.Second, time.Millisecond)
	l.Stop()
	require.GreaterOrEqual(t, time.Duration(firstAt.Load()), 50*time.Millisecond, "the first round waited for first")
	after := rounds.Load()
	time.Sleep(30 * time.Millisecond)
	require.Equal(t, after, rounds.Load(), "no round after Stop")
}

// TestStartAllUndoes: when one service fails to start, the ones already started are
// stopped again.
func TestStartAllUndoes(t *testing.T) {
	t.Parallel()
	var stopped atomic.Bool
	a := startstop.NewLoop("a", func(ctx context.Context) { <-ctx.Done(); stopped.Store(true) })
	b := startstop.NewLoop("b", func(ctx context.Context) { <-ctx.Done() })
	require.NoError(t, b.Start(t.Context())) // started already: StartAll's Start of b fails
	defer b.Stop()
	require.ErrorIs(t, startstop.StartAll(t.Context(), a, b), startstop.ErrStarted)
	require.True(t, stopped.Load(), "a was stopped again")
}

// TestStopAllTimesEachService: StopAll stops services together and says how long each
// took, in the order given, so a slow shutdown names the loop that held it.
func TestStopAllTimesEachService(t *testing.T) {
	t.Parallel()
	const drain = 150 * time.Millisecond
	slow := func(name string) *startstop.Loop {
		return startstop.NewLoop(name, func(ctx context.Context) { <-ctx.Done(); time.Sleep(drain) })
	}
	a, b := slow("slow a"), slow("slow b")
	quick := startstop.NewLoop("quick", func(ctx context.Context) { <-ctx.Done() })
	never := startstop.NewLoop("never started", func(ctx context.Context) { <-ctx.Done() })
	require.NoError(t, startstop.StartAll(t.Context(), a, b, quick))
	began := time.Now()
	stopped := startstop.StopAll(a, b, quick, never)
	took := time.Since(began)
	require.Len(t, stopped, 4)
	require.Equal(t, []string{"slow a", "slow b", "quick", "never started"},
		[]string{stopped[0].Name, stopped[1].Name, stopped[2].Name, stopped[3].Name})
	require.GreaterOrEqual(t, stopped[0].Took, drain, "a slow loop's drain is counted")
	require.GreaterOrEqual(t, stopped[1].Took, drain, "a slow loop's drain is counted")
	require.Less(t, stopped[2].Took, stopped[0].Took, "the quick loop did not wait for a slow one")
	// One after the other, the two drains would take twice as long.
	require.Less(t, took, 2*drain, "stopped together")
}
