package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// MatchResult is the payload-match figure: events correlated by a business key per
// second, with a given number of open waits in the table.
type MatchResult struct {
	// Waiting is how many open waits the table held when the events arrived, Matched how
	// many of them the events completed (one each).
	Waiting int `json:"waiting"`
	Matched int `json:"matched"`
	// Seconds is the time to apply every event, PerSecond the events applied per second.
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	// Lookup is one index lookup of a record's keys (WaitStateListByMatchKeys), timed
	// alone: the cost that must not grow with the table.
	Lookup Latencies `json:"lookup"`
	// FillSeconds is how long parking the waits took (not measured).
	FillSeconds float64 `json:"fill_seconds"`
	// Lookback is the payload match's lookback ("" when off): the same events then carry
	// the keys they would be kept under, and Early measures the records that come first.
	Lookback string       `json:"lookback,omitempty"`
	Early    *EarlyResult `json:"early,omitempty"`
}

// EarlyResult is the cost of records that beat their waits, with lookback on: each is
// kept (its key locked, the waits looked up again, a row written), then a wait
// registering with its value takes it in the registering transaction and completes.
//
// RegisteredPerSecond is the reference: as many waits registered, at the same number of
// open waits of the type, with nothing kept for them.
type EarlyResult struct {
	Records             int     `json:"records"`
	KeptSeconds         float64 `json:"kept_seconds"`
	KeptPerSecond       float64 `json:"kept_per_second"`
	RegisterSeconds     float64 `json:"register_seconds"`
	RegisteredPerSecond float64 `json:"registered_per_second"`
	TakeSeconds         float64 `json:"take_seconds"`
	TakenPerSecond      float64 `json:"taken_per_second"`
}

const (
	matchWorkflow = "bench-match"
	matchTopic    = "bench.match"
	matchBatch    = 64
	lookupSamples = 2000
)

// Match parks waiting open waits of a workflow whose wait_events node expects a Kafka
// record with order.id equal to its input's order_id — matched of them measured, the
// others each waiting for a key nobody sends — then applies one event per measured wait,
// correlated by payload (aggregator.MatchKeys), from concurrency workers in batches as
// the consumer's lanes do, straight to the aggregator: what is measured is finding the
// waits by their key and applying, not the broker.
//
// With lookback > 0 the match has that lookback: the measured events are the same (they
// find their waits), and then as many records for values no wait expects yet are kept
// and taken by waits registered after them (Early).
func Match(ctx context.Context, url string, waiting, matched, concurrency int, lookback time.Duration, logger *slog.Logger) (MatchResult, error) {
	if matched > waiting-1 {
		return MatchResult{}, fmt.Errorf("match: %d measured waits do not fit in %d waiting", matched, waiting)
	}
	start := time.Now()
	rig, err := startKafka(ctx, url, 1, false, nil, nil, logger)
	if err != nil {
		return MatchResult{}, err
	}
	lookbackField := ""
	if lookback > 0 {
		lookbackField = fmt.Sprintf(`"lookback":%q,`, lookback)
	}
	def := fmt.Sprintf(`{"name":%q,"nodes":[{"id":"wait","type":"wait_events","data":{"timeout":604800,
		"events":[{"name":"paid","source":"kafka","topic":%q,%s"match":{"left":"order.id","op":"eq","right":"input.order_id"}}]}}]}`,
		matchWorkflow, matchTopic, lookbackField)
	if _, err := rig.svc.Exec.PutWorkflow(ctx, matchWorkflow, []byte(def)); err != nil {
		rig.close()
		return MatchResult{}, fmt.Errorf("store match workflow: %w", err)
	}
	started, err := rig.svc.Exec.StartExecution(ctx, matchWorkflow, []byte(`{"order_id":"template"}`))
	if err == nil {
		err = waitParked(ctx, rig.svc.Pool(), []uuid.UUID{started.ID})
	}
	rig.close()
	if err != nil {
		return MatchResult{}, fmt.Errorf("park template wait: %w", err)
	}

	pool, err := db.Connect(ctx, url, int32(concurrency+2))
	if err != nil {
		return MatchResult{}, err
	}
	defer pool.Close()
	var keys []string
	if err := pool.QueryRow(ctx, `SELECT match_keys FROM execution_wait_states WHERE execution_id = $1`, started.ID).Scan(&keys); err != nil {
		return MatchResult{}, fmt.Errorf("read template keys: %w", err)
	}
	valueKey, typeKey := keys[0], keys[1]
	prefix := strings.TrimSuffix(valueKey, `"template"`)
	// Each clone waits for a key of its own: "<tag>-<its wait id>", in its match keys and
	// in the match its expected event stores, as registering would have written them.
	keyed := func(tag string) map[string]string {
		value := fmt.Sprintf(`'"%s-' || src.wait_id::text || '"'`, tag)
		return map[string]string{
			"match_keys":      fmt.Sprintf(`ARRAY[%s || %s, %s]`, literal(prefix), value, literal(typeKey)),
			"expected_events": fmt.Sprintf(`jsonb_set(t.expected_events::jsonb, '{0,match,value}', to_jsonb(%s))::json`, value),
		}
	}
	if _, err := cloneWaits(ctx, pool, started.ID, waiting-1-matched, true, keyed("bg")); err != nil {
		return MatchResult{}, err
	}
	ids, err := cloneWaits(ctx, pool, started.ID, matched, false, keyed("m"))
	if err != nil {
		return MatchResult{}, err
	}
	for _, table := range []string{"executions", "node_execution_rows", "execution_wait_states"} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
			return MatchResult{}, fmt.Errorf("vacuum %s: %w", table, err)
		}
	}
	execs := make([]uuid.UUID, len(ids))
	for i, w := range ids {
		execs[i] = w.exec
	}
	rows, err := pool.Query(ctx, `SELECT match_keys[1] FROM execution_wait_states WHERE execution_id = ANY($1)`, execs)
	if err != nil {
		return MatchResult{}, err
	}
	measured, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return MatchResult{}, err
	}
	res := MatchResult{Matched: matched, FillSeconds: time.Since(start).Seconds()}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM execution_wait_states WHERE status = 'waiting'`).Scan(&res.Waiting); err != nil {
		return MatchResult{}, err
	}

	// The lookup alone, for keys of measured waits, in random order.
	q := dbsqlc.New()
	var lookups []time.Duration
	for range lookupSamples {
		k := measured[rand.IntN(len(measured))]
		t0 := time.Now()
		found, err := q.WaitStateListByMatchKeys(ctx, pool, []string{k})
		if err != nil {
			return MatchResult{}, fmt.Errorf("lookup: %w", err)
		}
		lookups = append(lookups, time.Since(t0))
		if len(found) != 1 {
			return MatchResult{}, fmt.Errorf("lookup of a measured key found %d waits, want 1", len(found))
		}
	}
	res.Lookup = Summarise(lookups)

	agg, err := aggregator.New(pool, aggregator.Config{InstanceID: "bench-match", Logger: logger})
	if err != nil {
		return MatchResult{}, err
	}
	specs := []aggregator.MatchSpec{{Left: "order.id", Lookback: lookback}}
	batches := make(chan []string)
	go func() {
		defer close(batches)
		for i := 0; i < len(measured); i += matchBatch {
			select {
			case batches <- measured[i:min(i+matchBatch, len(measured))]:
			case <-ctx.Done():
				return
			}
		}
	}()
	var mu sync.Mutex
	var completed int
	var firstErr error
	var wg sync.WaitGroup
	t0 := time.Now()
	for range concurrency {
		wg.Go(func() {
			for batch := range batches {
				events := make([]aggregator.Event, len(batch))
				for i, k := range batch {
					value := k[len(prefix):] // the JSON string the wait expects
					payload := []byte(`{"order":{"id":` + value + `},"amount":1}`)
					var decoded any = map[string]any{"order": map[string]any{"id": strings.Trim(value, `"`)}}
					events[i] = aggregator.Event{MatchKeys: aggregator.MatchKeys(matchTopic, decoded, specs),
						Keep: aggregator.KeepFor(matchTopic, decoded, specs), Payload: payload,
						Source: aggregator.Source{Kind: "kafka", Topic: matchTopic}}
				}
				var results []aggregator.Result
				err := db.Tx(ctx, pool, func(tx pgx.Tx) error {
					var err error
					results, err = agg.ApplyBatch(ctx, tx, events)
					return err
				})
				n := 0
				for _, r := range results {
					if r.Outcome == aggregator.Completed {
						n++
					}
				}
				mu.Lock()
				completed += n
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(t0).Seconds()
	if firstErr != nil {
		return MatchResult{}, fmt.Errorf("apply: %w", firstErr)
	}
	if completed != matched {
		return MatchResult{}, fmt.Errorf("match: %d of %d events completed their wait", completed, matched)
	}
	res.PerSecond = float64(matched) / res.Seconds
	if lookback > 0 {
		res.Lookback = lookback.String()
		early, err := matchEarly(ctx, pool, agg, matched, concurrency, lookback, specs)
		if err != nil {
			return MatchResult{}, err
		}
		res.Early = &early
	}
	return res, nil
}

// matchEarly applies n records for values no wait expects yet (kept), in batches from
// concurrency workers, then registers one wait per value as the executor does — the
// wait, then what is kept for it, in one transaction — each taking its record.
func matchEarly(ctx context.Context, pool *pgxpool.Pool, agg *aggregator.Aggregator, n, concurrency int,
	lookback time.Duration, specs []aggregator.MatchSpec) (EarlyResult, error) {
	res := EarlyResult{Records: n}
	values := make([]string, n)
	for i := range values {
		values[i] = fmt.Sprintf("early-%d", i)
	}
	run := func(items int, work func(lo, hi int) (int, error)) (float64, error) {
		next := make(chan int)
		go func() {
			defer close(next)
			for i := 0; i < items; i += matchBatch {
				select {
				case next <- i:
				case <-ctx.Done():
					return
				}
			}
		}()
		var mu sync.Mutex
		var done int
		var firstErr error
		var wg sync.WaitGroup
		t0 := time.Now()
		for range concurrency {
			wg.Go(func() {
				for lo := range next {
					k, err := work(lo, min(lo+matchBatch, items))
					mu.Lock()
					done += k
					if err != nil && firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if firstErr == nil && done != items {
			firstErr = fmt.Errorf("%d of %d done", done, items)
		}
		return time.Since(t0).Seconds(), firstErr
	}
	var err error
	res.KeptSeconds, err = run(n, func(lo, hi int) (int, error) {
		events := make([]aggregator.Event, 0, hi-lo)
		for _, v := range values[lo:hi] {
			decoded := map[string]any{"order": map[string]any{"id": v}}
			events = append(events, aggregator.Event{MatchKeys: aggregator.MatchKeys(matchTopic, decoded, specs),
				Keep: aggregator.KeepFor(matchTopic, decoded, specs), Payload: []byte(`{"order":{"id":"` + v + `"},"amount":1}`),
				Source: aggregator.Source{Kind: "kafka", Topic: matchTopic}})
		}
		var results []aggregator.Result
		err := db.Tx(ctx, pool, func(tx pgx.Tx) error {
			var err error
			results, err = agg.ApplyBatch(ctx, tx, events)
			return err
		})
		kept := 0
		for _, r := range results {
			if r.Outcome == aggregator.Kept {
				kept++
			}
		}
		return kept, err
	})
	if err != nil {
		return EarlyResult{}, fmt.Errorf("keep early records: %w", err)
	}
	res.KeptPerSecond = float64(n) / res.KeptSeconds
	// register registers a wait for value as the executor does and reports whether the
	// outcome of what it took is want ("" when nothing is to be taken).
	register := func(v string, want aggregator.Outcome) (bool, error) {
		value, _ := aggregator.MatchValue(v)
		ok := false
		err := db.Tx(ctx, pool, func(tx pgx.Tx) error {
			execID := db.NewID()
			if _, err := tx.Exec(ctx, `INSERT INTO executions (id, workflow_name, workflow_version, status, input)
				VALUES ($1, $2, 1, 'running', jsonb_build_object('order_id', $3::text))`, execID, matchWorkflow, v); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO node_execution_rows (execution_id, node_id, status, attempts, started_at)
				VALUES ($1, 'wait', 'waiting_for_events', 1, now())`, execID); err != nil {
				return err
			}
			ws, err := agg.Register(ctx, tx, aggregator.Registration{ExecutionID: execID, NodeID: "wait", CorrelationID: db.NewID(),
				Strategy: vocab.StrategyAll, Timeout: 7 * 24 * time.Hour, OnTimeout: vocab.OnTimeoutFail,
				OutputMapping: map[string]string{"paid": "paid"},
				Expected: []aggregator.Expected{{Name: "paid", Source: aggregator.SourceKafka, Topic: matchTopic, Required: true,
					Match: &aggregator.ExpectedMatch{Left: "order.id", Value: value}, LookbackMS: lookback.Milliseconds()}}})
			if err != nil {
				return err
			}
			r, err := agg.TakeBuffered(ctx, tx, ws)
			if err != nil {
				return err
			}
			ok = r.Outcome == want
			if want == "" {
				// The reference's wait stops waiting too, so the open waits the
				// admission count reads stay as many as the taking registrations see.
				_, err = tx.Exec(ctx, `UPDATE execution_wait_states SET status = 'cancelled' WHERE id = $1`, ws.ID)
			}
			return err
		})
		return ok, err
	}
	registerAll := func(prefix string, want aggregator.Outcome) (float64, error) {
		return run(n, func(lo, hi int) (int, error) {
			done := 0
			for i := lo; i < hi; i++ {
				ok, err := register(fmt.Sprintf("%s-%d", prefix, i), want)
				if err != nil {
					return done, err
				}
				if ok {
					done++
				}
			}
			return done, nil
		})
	}
	// First as many registrations with nothing kept for them, as a reference.
	if res.RegisterSeconds, err = registerAll("plain", ""); err != nil {
		return EarlyResult{}, fmt.Errorf("register waits: %w", err)
	}
	res.RegisteredPerSecond = float64(n) / res.RegisterSeconds
	if res.TakeSeconds, err = registerAll("early", aggregator.Completed); err != nil {
		return EarlyResult{}, fmt.Errorf("take early records: %w", err)
	}
	res.TakenPerSecond = float64(n) / res.TakeSeconds
	return res, nil
}

// literal quotes s as an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
