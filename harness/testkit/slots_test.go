package testkit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSlots races takers of one budget for real: flock locks belong to open files, so
// takers in goroutines of one process contend exactly as test processes do.
func TestSlots(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	take := func(whole bool) <-chan func() {
		got := make(chan func(), 1)
		go func() {
			release, err := lockSlots(dir, 2, whole)
			if err != nil {
				t.Error(err)
				return
			}
			got <- release
		}()
		return got
	}
	// wait returns the release a taker got, or nil when it still waits after d.
	wait := func(ch <-chan func(), d time.Duration) func() {
		select {
		case r := <-ch:
			return r
		case <-time.After(d):
			return nil
		}
	}

	a := wait(take(false), 5*time.Second)
	b := wait(take(false), 5*time.Second)
	require.NotNil(t, a, "the first package takes a slot")
	require.NotNil(t, b, "so does a second beside it")

	third := take(false)
	require.Nil(t, wait(third, 300*time.Millisecond), "a third waits while two run")
	a()
	c := wait(third, 5*time.Second)
	require.NotNil(t, c, "and runs once one is given back")

	// A package that needs the whole server takes the slots in order, each waited for:
	// it waits for both, and nothing runs beside it.
	whole := take(true)
	require.Nil(t, wait(whole, 300*time.Millisecond), "a package that needs the whole server waits for every slot")
	c()
	require.Nil(t, wait(whole, 300*time.Millisecond), "even with one left taken")
	b()
	w := wait(whole, 5*time.Second)
	require.NotNil(t, w, "and runs once all are given back")
	after := take(false)
	require.Nil(t, wait(after, 300*time.Millisecond), "nothing runs beside it")
	w()
	r := wait(after, 5*time.Second)
	require.NotNil(t, r)
	r()
}
