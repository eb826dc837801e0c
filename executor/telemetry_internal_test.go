package executor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestObserveResumedAttributes: the waits of one batch are each counted under their own
// workflow, strategy and outcome, however they alternate (the attribute set is built once
// per run of alike waits), and a timer under its type.
func TestObserveResumedAttributes(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	e := &Executor{}
	var err error
	e.ins.waitDuration, err = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("t").Float64Histogram("rendezvous.wait.duration")
	require.NoError(t, err)

	t0 := time.Now()
	wait := func(wf string, strategy vocab.Strategy, status vocab.WaitStatus, typ vocab.WaitType) resumedWait {
		return resumedWait{workflow: wf, span: tracenoop.Span{}, wait: aggregator.Ended{
			WaitType: typ, Strategy: strategy, Status: status, CreatedAt: t0, EndedAt: t0.Add(time.Second)}}
	}
	events, timer := vocab.WaitTypeEvents, vocab.WaitTypeTimer
	e.observeResumed(context.Background(), []resumedWait{
		wait("a", vocab.StrategyAll, vocab.WaitCompleted, events),
		wait("a", vocab.StrategyAll, vocab.WaitCompleted, events),
		wait("b", vocab.StrategyAll, vocab.WaitCompleted, events),
		wait("a", vocab.StrategyAll, vocab.WaitCompleted, events),
		wait("a", vocab.StrategyAny, vocab.WaitCompleted, events),
		wait("a", vocab.StrategyAll, vocab.WaitTimeout, events),
		wait("a", "", vocab.WaitResumed, timer),
	})

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "rendezvous.wait.duration" {
				continue
			}
			for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				v := func(k string) string { s, _ := p.Attributes.Value(attribute.Key(k)); return s.AsString() }
				got[v("workflow")+" "+v("strategy")+" "+v("outcome")] = p.Count
			}
		}
	}
	require.Equal(t, map[string]uint64{
		"a all completed": 3,
		"b all completed": 1,
		"a any completed": 1,
		"a all timeout":   1,
		"a timer resumed": 1,
	}, got)
}
