package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// spec builds a wait registered at t0 with an overall timeout of 10 s; own gives events
// their own deadlines (seconds after t0).
func spec(t0 time.Time, strategy, onTimeout string, required []string, events ...SpecEvent) WaitSpec {
	return WaitSpec{Strategy: strategy, OnTimeout: onTimeout, Required: required, Events: events, Expires: t0.Add(10 * time.Second)}
}

func ev(t0 time.Time, name string, required bool, deadline float64) SpecEvent {
	return SpecEvent{Name: name, Required: required, Deadline: t0.Add(time.Duration(deadline * float64(time.Second)))}
}

func TestSimulate(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	api, kafka := EventAPI, EventKafka
	both := []string{api, kafka}

	for _, tc := range []struct {
		name string
		spec WaitSpec
		at   map[string]time.Time
		want Result
	}{
		{"all: both arrive", spec(t0, "all", "fail", both, ev(t0, api, true, 10), ev(t0, kafka, true, 10)),
			map[string]time.Time{api: at(1), kafka: at(2)}, Result{ClassCompleted, []string{api, kafka}}},
		{"all: one missing fails", spec(t0, "all", "fail", both, ev(t0, api, true, 10), ev(t0, kafka, true, 10)),
			map[string]time.Time{api: at(1)}, Result{ClassFailed, []string{api}}},
		{"all: arrival at the overall deadline is late", spec(t0, "all", "continue_with_partial", both, ev(t0, api, true, 10), ev(t0, kafka, true, 10)),
			map[string]time.Time{api: at(1), kafka: at(10)}, Result{ClassContinued, []string{api}}},
		{"all: continue needs only required:true events", spec(t0, "all", "continue", both, ev(t0, api, true, 10), ev(t0, kafka, false, 10)),
			map[string]time.Time{api: at(1)}, Result{ClassContinued, []string{api}}},
		{"all: continue without a required:true event fails", spec(t0, "all", "continue", both, ev(t0, api, true, 10), ev(t0, kafka, false, 10)),
			map[string]time.Time{kafka: at(1)}, Result{ClassFailed, []string{kafka}}},
		// A per-event deadline under all ends the wait at once: a later arrival of the
		// other event is late, whenever a sweeper gets to it.
		{"all: own deadline ends the wait", spec(t0, "all", "continue_with_partial", both, ev(t0, api, true, 5), ev(t0, kafka, false, 10)),
			map[string]time.Time{kafka: at(6)}, Result{ClassContinued, []string{}}},
		{"any: first arrival completes", spec(t0, "any", "fail", nil, ev(t0, api, false, 10), ev(t0, kafka, false, 5)),
			map[string]time.Time{kafka: at(4), api: at(6)}, Result{ClassCompleted, []string{kafka}}},
		{"any: one event timing out is not the end", spec(t0, "any", "fail", nil, ev(t0, api, false, 10), ev(t0, kafka, false, 5)),
			map[string]time.Time{kafka: at(6), api: at(7)}, Result{ClassCompleted, []string{api}}},
		{"any: continue with no required event continues empty", spec(t0, "any", "continue", nil, ev(t0, api, false, 10), ev(t0, kafka, false, 5)),
			nil, Result{ClassContinued, []string{}}},
		{"any: continue with a required:true event missing fails", spec(t0, "any", "continue", nil, ev(t0, api, true, 10), ev(t0, kafka, false, 10)),
			nil, Result{ClassFailed, []string{}}},
		{"required_only: optional missing does not matter", spec(t0, "required_only", "fail", []string{api}, ev(t0, api, true, 10), ev(t0, kafka, false, 4)),
			map[string]time.Time{api: at(8)}, Result{ClassCompleted, []string{api}}},
		{"required_only: optional after its own deadline is late", spec(t0, "required_only", "fail", []string{api}, ev(t0, api, true, 10), ev(t0, kafka, false, 4)),
			map[string]time.Time{kafka: at(5), api: at(8)}, Result{ClassCompleted, []string{api}}},
		{"required_only: optional recorded before the required one", spec(t0, "required_only", "fail", []string{api}, ev(t0, api, true, 10), ev(t0, kafka, false, 4)),
			map[string]time.Time{kafka: at(3), api: at(8)}, Result{ClassCompleted, []string{api, kafka}}},
		{"required_only: required deadline ends it, later optional is late", spec(t0, "required_only", "continue_with_partial", []string{kafka}, ev(t0, api, false, 10), ev(t0, kafka, true, 6)),
			map[string]time.Time{api: at(7)}, Result{ClassContinued, []string{}}},
		{"required_only: continue goes on with the required events that arrived", spec(t0, "required_only", "continue", []string{kafka}, ev(t0, api, false, 10), ev(t0, kafka, true, 6)),
			map[string]time.Time{api: at(1)}, Result{ClassContinued, []string{api}}},
		{"custom: continue needs the required set", spec(t0, "custom", "continue", []string{kafka}, ev(t0, api, false, 10), ev(t0, kafka, true, 6)),
			map[string]time.Time{api: at(1)}, Result{ClassFailed, []string{api}}},
		{"custom: only the listed event counts", spec(t0, "custom", "fail", []string{kafka}, ev(t0, api, true, 5), ev(t0, kafka, true, 10)),
			map[string]time.Time{kafka: at(9)}, Result{ClassCompleted, []string{kafka}}},
		{"custom: continue ignores required:true outside the list", spec(t0, "custom", "continue", []string{api}, ev(t0, api, false, 10), ev(t0, kafka, true, 5)),
			map[string]time.Time{}, Result{ClassFailed, []string{}}},
		{"custom: an unlisted event's deadline does not end it", spec(t0, "custom", "fail", []string{api}, ev(t0, api, false, 10), ev(t0, kafka, true, 5)),
			map[string]time.Time{api: at(9.9)}, Result{ClassCompleted, []string{api}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Simulate(tc.spec, tc.at))
		})
	}
}

func TestAllowed(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	all := spec(t0, "all", "fail", []string{EventAPI, EventKafka}, ev(t0, EventAPI, true, 10), ev(t0, EventKafka, true, 10))

	t.Run("windows clear of deadlines give one outcome", func(t *testing.T) {
		t.Parallel()
		got := Allowed(all, map[string]Window{EventAPI: {Lo: at(1), Hi: at(1.1)}, EventKafka: {Lo: at(2), Hi: at(4)}})
		require.Equal(t, []Result{{ClassCompleted, []string{EventAPI, EventKafka}}}, got)
	})
	t.Run("a window spanning the deadline allows both", func(t *testing.T) {
		t.Parallel()
		got := Allowed(all, map[string]Window{EventAPI: {Lo: at(1), Hi: at(1.1)}, EventKafka: {Lo: at(9.9), Hi: at(10.1)}})
		require.Equal(t, []Result{{ClassCompleted, []string{EventAPI, EventKafka}}, {ClassFailed, []string{EventAPI}}}, got)
	})
	t.Run("an open window may also never arrive", func(t *testing.T) {
		t.Parallel()
		got := Allowed(all, map[string]Window{EventAPI: {Lo: at(1), Hi: at(1.1)}, EventKafka: {Lo: at(2), Open: true}})
		require.Equal(t, []Result{{ClassCompleted, []string{EventAPI, EventKafka}}, {ClassFailed, []string{EventAPI}}}, got)
	})
	t.Run("overlapping windows under any allow either event first", func(t *testing.T) {
		t.Parallel()
		anyOf := spec(t0, "any", "fail", nil, ev(t0, EventAPI, false, 10), ev(t0, EventKafka, false, 10))
		got := Allowed(anyOf, map[string]Window{EventAPI: {Lo: at(1), Hi: at(2)}, EventKafka: {Lo: at(1.5), Hi: at(3)}})
		require.Equal(t, []Result{{ClassCompleted, []string{EventAPI}}, {ClassCompleted, []string{EventKafka}}}, got)
	})
	t.Run("a delivery after the deadline is certainly late", func(t *testing.T) {
		t.Parallel()
		got := Allowed(all, map[string]Window{EventAPI: {Lo: at(1), Hi: at(1.1)}, EventKafka: {Lo: at(10.2), Open: true}})
		require.Equal(t, []Result{{ClassFailed, []string{EventAPI}}}, got)
	})
}
