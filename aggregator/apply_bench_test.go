package aggregator_test

import (
	"sync/atomic"
	"testing"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// BenchmarkApply measures the aggregator alone (no HTTP): concurrent callers completing
// api-only waits, so group commit decides them together.
func BenchmarkApply(b *testing.B) {
	f := setup(b)
	reg := registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}})
	waits := f.newWaits(b, b.N+64, reg)
	var next atomic.Int64
	b.SetParallelism(4) // 8 goroutines on 2 cores, as the callback benchmark's clients
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := waits[next.Add(1)-1]
			if _, err := f.agg.Apply(b.Context(), w.event(api, apiPayload)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
