package bench

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// LatencyResult is one path's latency at a fixed offered rate.
type LatencyResult struct {
	// Path is "kafka" or "callback".
	Path string `json:"path"`
	// OfferedRate is events per second scheduled; Events were scheduled over Seconds.
	OfferedRate float64 `json:"offered_rate"`
	Events      int     `json:"events"`
	Seconds     float64 `json:"seconds"`
	// SendLag is how late the load generator sent events against their schedule: when it
	// is large the generator, not the system, set the pace, and the figure is suspect.
	SendLag Latencies `json:"send_lag"`
	// ToState is from the scheduled send to the wait's change (updated_at, written in
	// the transaction that applies the event, just before its commit).
	ToState Latencies `json:"to_state"`
	// ToContinuation is from the scheduled send to the continuation committed.
	ToContinuation Latencies `json:"to_continuation"`
	// Answer is from the scheduled send to the 202 received (callbacks only).
	Answer Latencies `json:"answer"`
	// Stages split ToContinuation into consecutive steps (see KafkaLatency and
	// CallbackLatency), each event's steps adding up to its total: where the time goes.
	Stages []Stage `json:"stages"`
}

// Stage is one step of the way from the load generator to the continuation.
type Stage struct {
	Name    string    `json:"name"`
	Latency Latencies `json:"latency"`
}

// schedule calls send(i) for i in [0, n) at start + i/rate, from one goroutine, whether
// or not earlier sends have completed (an open loop: a slow system does not slow the
// arrivals down, so queueing shows in the latencies instead of hiding in a lower rate,
// and latencies are measured from the scheduled time, so a late send counts against
// the system too). When the loop falls behind it sends everything already due at once.
// It returns each event's scheduled time and how late its send began.
func schedule(ctx context.Context, n int, rate float64, send func(i int)) ([]time.Time, []time.Duration, error) {
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now().Add(10 * time.Millisecond)
	at := make([]time.Time, n)
	lag := make([]time.Duration, n)
	for i := range n {
		at[i] = start.Add(time.Duration(i) * interval)
		if d := time.Until(at[i]); d > 0 {
			if err := sleepCtx(ctx, d); err != nil {
				return nil, nil, err
			}
		}
		lag[i] = time.Since(at[i])
		send(i)
	}
	return at, lag, nil
}

// stages summarises consecutive moments of each event: stage k is from moments[k] to
// moments[k+1].
func stages(names []string, moments [][]time.Time) []Stage {
	out := make([]Stage, len(names))
	for k, name := range names {
		d := make([]time.Duration, 0, len(moments))
		for _, m := range moments {
			d = append(d, m[k+1].Sub(m[k]))
		}
		out[k] = Stage{Name: name, Latency: Summarise(d)}
	}
	return out
}

// KafkaLatency parks rate×d Kafka-only waits and produces their records at a fixed rate
// (one replica, like Kafka), measuring from each record's scheduled produce time. Its
// stages come from a hook of the replica's Kafka client, which stamps each record when
// the client buffers it and when the consumer polls it, and from the replica's own
// spans: the event's span starts once the applying transaction has committed.
func KafkaLatency(ctx context.Context, url string, partitions int, rate float64, d time.Duration, logger *slog.Logger) (LatencyResult, error) {
	n := int(math.Ceil(rate * d.Seconds()))
	if n <= 0 {
		return LatencyResult{}, fmt.Errorf("offered rate %.1f/s over %s is no event", rate, d)
	}
	rec := tracetest.NewSpanRecorder()
	buffer := &bufferTimes{at: map[offset]bufferStamps{}}
	rig, err := startKafka(ctx, url, partitions, true, rec, []kgo.Hook{buffer}, logger)
	if err != nil {
		return LatencyResult{}, err
	}
	defer rig.close()
	ids, err := rig.park(ctx, n)
	if err != nil {
		return LatencyResult{}, err
	}
	var mu sync.Mutex
	var produceErr error
	acked := make([]time.Time, n)
	byOffset := make(map[offset]int, n)
	var wg sync.WaitGroup
	at, lag, err := schedule(ctx, n, rate, func(i int) {
		wg.Add(1)
		rig.producer.Produce(ctx, ids[i].record(), func(r *kgo.Record, err error) {
			mu.Lock()
			acked[i] = time.Now()
			byOffset[offset{r.Partition, r.Offset}] = i
			if err != nil {
				produceErr = err
			}
			mu.Unlock()
			wg.Done()
		})
	})
	wg.Wait()
	if err != nil {
		return LatencyResult{}, err
	}
	if produceErr != nil {
		return LatencyResult{}, fmt.Errorf("produce: %w", produceErr)
	}
	if err := rig.waitApplied(ctx, n); err != nil {
		return LatencyResult{}, err
	}
	times, err := resumeTimes(ctx, rig.svc, ids)
	if err != nil {
		return LatencyResult{}, err
	}

	byCorr := make(map[uuid.UUID]int, n)
	for i, w := range ids {
		byCorr[w.corr] = i
	}
	buffered, polled, observed := make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	for o, st := range buffer.stamps() {
		if i, ok := byOffset[o]; ok {
			buffered[i], polled[i] = st.buffered, st.polled
		}
	}
	for _, s := range rec.Ended() {
		if s.Name() != "rendezvous.wait.event kafka_event" {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key != "rendezvous.correlation_id" {
				continue
			}
			if id, err := uuid.Parse(a.Value.AsString()); err == nil {
				if i, ok := byCorr[id]; ok {
					observed[i] = s.StartTime()
				}
			}
		}
	}
	toState := make([]time.Duration, n)
	toCont := make([]time.Duration, n)
	moments := make([][]time.Time, 0, n)
	for i, w := range ids {
		t := times[w.corr]
		toState[i] = t.state.Sub(at[i])
		if !buffered[i].IsZero() && !observed[i].IsZero() {
			// A continuation run in the deciding transaction stamps resumed_at before
			// that transaction commits: it is committed once the event is observed.
			cont := later(t.resumed, observed[i])
			toCont[i] = cont.Sub(at[i])
			moments = append(moments, []time.Time{at[i], acked[i], buffered[i], polled[i], t.state, observed[i], cont})
		}
	}
	if len(moments) < n {
		return LatencyResult{}, fmt.Errorf("spans found for only %d of %d records", len(moments), n)
	}
	return LatencyResult{Path: "kafka", OfferedRate: rate, Events: n, Seconds: at[n-1].Sub(at[0]).Seconds(),
		SendLag: Summarise(lag), ToState: Summarise(toState), ToContinuation: Summarise(toCont),
		Stages: stages([]string{
			"produce: scheduled → acknowledged by the broker",
			"fetch: acknowledged → in the consumer's buffer",
			"poll: in the buffer → polled (the previous batch is being applied)",
			"apply: polled → wait state updated",
			"commit: updated → committed and observed",
			"continuation: committed → continuation committed (0: in the same transaction)",
		}, moments)}, nil
}

// offset is where a record is: its partition of the bench topic and its offset.
type offset struct {
	partition int32
	offset    int64
}

// bufferStamps are when the Kafka client buffered a record and when it was polled.
type bufferStamps struct{ buffered, polled time.Time }

// bufferTimes is a hook of a Kafka client that stamps each record it fetches, by offset.
type bufferTimes struct {
	mu sync.Mutex
	at map[offset]bufferStamps
}

func (b *bufferTimes) OnFetchRecordBuffered(r *kgo.Record) {
	now := time.Now()
	b.mu.Lock()
	b.at[offset{r.Partition, r.Offset}] = bufferStamps{buffered: now}
	b.mu.Unlock()
}

func (b *bufferTimes) OnFetchRecordUnbuffered(r *kgo.Record, _ bool) {
	now := time.Now()
	b.mu.Lock()
	o := offset{r.Partition, r.Offset}
	st := b.at[o]
	st.polled = now
	b.at[o] = st
	b.mu.Unlock()
}

// stamps are the records' stamps so far.
func (b *bufferTimes) stamps() map[offset]bufferStamps {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.at)
}

// maxInFlight bounds the callbacks CallbackLatency has in flight: a server that falls
// behind would otherwise be sent connections until the process runs out of files. Past
// it, sends start late; latency is still measured from the scheduled time.
const maxInFlight = 1024

// CallbackLatency parks rate×d API-only waits and posts their callbacks at a fixed rate,
// each on its own goroutine (so a slow answer delays no later send, up to maxInFlight),
// measuring from each callback's scheduled send time.
func CallbackLatency(ctx context.Context, url string, rate float64, d time.Duration, logger *slog.Logger) (LatencyResult, error) {
	n := int(math.Ceil(rate * d.Seconds()))
	if n <= 0 {
		return LatencyResult{}, fmt.Errorf("offered rate %.1f/s over %s is no event", rate, d)
	}
	rig, err := startCallbacks(ctx, url, logger)
	if err != nil {
		return LatencyResult{}, err
	}
	defer rig.close()
	ids, err := rig.park(ctx, n)
	if err != nil {
		return LatencyResult{}, err
	}
	// Idle connections are kept for as many callbacks as may be in flight at once; more
	// are opened when the server falls behind, as real callers would.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	var failOnce sync.Once
	var failed error
	answered := make([]time.Time, n)
	inFlight := make(chan struct{}, maxInFlight)
	at, lag, err := schedule(ctx, n, rate, func(i int) {
		wg.Add(1)
		inFlight <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-inFlight }()
			if err := rig.send(client, ids[i]); err != nil {
				failOnce.Do(func() { failed = err })
			}
			answered[i] = time.Now()
		}()
	})
	wg.Wait()
	if err != nil {
		return LatencyResult{}, err
	}
	if failed != nil {
		return LatencyResult{}, failed
	}
	times, err := resumeTimes(ctx, rig.svc, ids)
	if err != nil {
		return LatencyResult{}, err
	}
	toState := make([]time.Duration, n)
	toCont := make([]time.Duration, n)
	answer := make([]time.Duration, n)
	moments := make([][]time.Time, n)
	for i, w := range ids {
		t := times[w.corr]
		// The 202 goes out after the deciding transaction commits; a continuation run in
		// it stamps resumed_at before that commit, so it is committed by the answer.
		cont := later(t.resumed, answered[i])
		toState[i] = t.state.Sub(at[i])
		toCont[i] = cont.Sub(at[i])
		answer[i] = answered[i].Sub(at[i])
		moments[i] = []time.Time{at[i], t.state, answered[i], cont}
	}
	return LatencyResult{Path: "callback", OfferedRate: rate, Events: n, Seconds: at[n-1].Sub(at[0]).Seconds(),
		SendLag: Summarise(lag), ToState: Summarise(toState), ToContinuation: Summarise(toCont), Answer: Summarise(answer),
		Stages: stages([]string{
			"request: scheduled → wait state updated",
			"commit: updated → committed and answered (202 received)",
			"continuation: answered → continuation committed (0: in the same transaction)",
		}, moments)}, nil
}

// later is the later of two moments.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
