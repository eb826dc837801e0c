package bench

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/testkit"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

func TestSummarise(t *testing.T) {
	t.Parallel()
	require.Equal(t, Latencies{}, Summarise(nil))
	var d []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, Latencies{P50: 50 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}, Summarise(d))
	require.Equal(t, time.Duration(100)*time.Millisecond, d[0], "the input is left as it was")
}

// TestScheduleIsOpenLoop checks that a send that stalls does not move later events'
// scheduled times: they keep their slots, and the time they waited shows as lag, which
// is what latencies measured from the schedule then include.
func TestScheduleIsOpenLoop(t *testing.T) {
	t.Parallel()
	const n, rate, stall = 20, 1000.0, 50 * time.Millisecond
	var sent []int
	at, lag, err := schedule(t.Context(), n, rate, func(i int) {
		sent = append(sent, i)
		if i == 0 {
			time.Sleep(stall)
		}
	})
	require.NoError(t, err)
	require.Equal(t, n, len(sent))
	require.True(t, slices.IsSorted(sent))
	for i := 1; i < n; i++ {
		require.Equal(t, time.Millisecond, at[i].Sub(at[i-1]), "slot %d moved", i)
	}
	// Event 1 was due 1 ms after event 0 but could only go once the stalled send
	// returned.
	require.GreaterOrEqual(t, lag[1], stall-time.Millisecond)
}

// TestStages checks that steps are taken between consecutive moments and add up to the
// whole.
func TestStages(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	got := stages([]string{"a", "b"}, [][]time.Time{{ms(0), ms(3), ms(10)}, {ms(0), ms(1), ms(2)}})
	require.Equal(t, []Stage{
		{Name: "a", Latency: Latencies{P50: time.Millisecond, P99: 3 * time.Millisecond, Max: 3 * time.Millisecond}},
		{Name: "b", Latency: Latencies{P50: time.Millisecond, P99: 7 * time.Millisecond, Max: 7 * time.Millisecond}},
	}, got)
}

// TestClonedWaitsAreRealWaits parks waits the way the bench does — one through the
// replica, the rest cloned — and checks that the clones are the template's rows but for
// their ids and times, and that the replica completes and resumes every one of them
// when its record arrives, exactly as the template.
func TestClonedWaitsAreRealWaits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := dbtest.NewSchema(t)
	rig, err := startKafka(ctx, s.URL, 2, false, nil, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer rig.close()

	const n = 25
	ids, err := rig.park(ctx, n)
	require.NoError(t, err)
	require.Len(t, ids, n)
	pool := rig.svc.Pool()
	// Every column but the ids and times is the template's.
	for table, differ := range map[string]string{
		"execution_wait_states": `- 'id' - 'execution_id' - 'correlation_id' - 'created_at' - 'updated_at'`,
		"executions":            `- 'id' - 'created_at' - 'updated_at'`,
		"node_executions":       `- 'execution_id' - 'created_at' - 'updated_at' - 'started_at'`,
	} {
		var rows, distinct int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT to_jsonb(t) `+differ+`) FROM `+table+` AS t`).
			Scan(&rows, &distinct))
		require.Equal(t, n, rows, table)
		require.Equal(t, 1, distinct, "%s: clones differ from the template beyond ids and times", table)
	}

	for _, w := range ids {
		require.NoError(t, rig.producer.ProduceSync(ctx, w.record()).FirstErr())
	}
	require.NoError(t, rig.waitApplied(ctx, n))
	times, err := resumeTimes(ctx, rig.svc, ids)
	require.NoError(t, err)
	require.Len(t, times, n)
	var done, execs, corrs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE w.status = 'completed' AND w.resumed_at IS NOT NULL
			AND e.status = 'completed' AND w.version = 2),
		count(DISTINCT w.execution_id), count(DISTINCT w.correlation_id)
		FROM execution_wait_states AS w JOIN executions AS e ON e.id = w.execution_id`).Scan(&done, &execs, &corrs))
	require.Equal(t, n, done, "every wait completed, resumed and finished its execution")
	require.Equal(t, n, execs)
	require.Equal(t, n, corrs)
}

// TestFill checks the filler population: waiting rows of their own workflow, created
// over the past days with a week's timeout, counted and measured, and left alone by a
// Kafka run on the same table.
func TestFill(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := dbtest.NewSchema(t)
	logger := slog.New(slog.DiscardHandler)

	const n = 60
	before := time.Now()
	fill, err := Fill(ctx, s.URL, n, logger)
	require.NoError(t, err)
	require.Equal(t, n, fill.Waits)
	require.Positive(t, fill.TableBytes)

	pool, err := db.Connect(ctx, s.URL, 2)
	require.NoError(t, err)
	defer pool.Close()
	var oldest, newest time.Time
	var wrong int
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(w.created_at), max(w.created_at),
		count(*) FILTER (WHERE w.expires_at <> w.next_deadline_at OR e.workflow_name <> $1 OR w.status <> 'waiting'
			OR abs(extract(epoch FROM w.expires_at - w.created_at) - 7 * 86400) > 60)
		FROM execution_wait_states AS w JOIN executions AS e ON e.id = w.execution_id`, fillerWorkflow).
		Scan(&oldest, &newest, &wrong))
	require.Zero(t, wrong)
	require.True(t, oldest.After(before.Add(-6*24*time.Hour-time.Minute)), "oldest %s", oldest)
	require.True(t, oldest.Before(before.Add(-time.Hour)), "creation times are spread: oldest %s", oldest)

	const records = 10
	res, err := Kafka(ctx, s.URL, 1, records, false, logger)
	require.NoError(t, err)
	require.Equal(t, records, res.Records)
	require.Equal(t, n, res.OtherWaits)
	var stillWaiting int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM execution_wait_states AS w
		JOIN executions AS e ON e.id = w.execution_id WHERE e.workflow_name = $1 AND w.status = 'waiting'`, fillerWorkflow).
		Scan(&stillWaiting))
	require.Equal(t, n, stillWaiting, "the filler waits are never touched")
}

// TestPeerCountsWholeRows runs the peer comparison small and checks what it counts:
// both systems park and deliver every workflow, and the rows each writes come out as
// whole numbers per workflow — every backend's counters were read in the window they
// belong to (a counter reported late would leave a fraction here and an excess there).
// It runs alone, not in parallel: a backend starved of CPU by the package's other tests
// reported its counters a window late once under make test (6.65 rows a workflow).
func TestPeerCountsWholeRows(t *testing.T) {
	const workflows = 20
	res, err := Peer(t.Context(), dbtest.ServerURL(t), workflows, []int{4}, 1, 4, "", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Len(t, res.Rounds, 1)
	require.Len(t, res.Medians, 1)
	for _, s := range []PeerSide{res.Rounds[0].Rendezvous, res.Rounds[0].DBOS} {
		require.Positive(t, s.ParkedPerSecond, s.System)
		require.Positive(t, s.EventsPerSecond, s.System)
		require.Positive(t, s.SendToCompletion.P99, s.System)
		for _, rows := range []float64{s.RowsPerParked, s.RowsPerEvent} {
			require.GreaterOrEqual(t, rows, 1.0, s.System)
			require.Equal(t, float64(int(rows)), rows, "%s: rows per workflow are whole", s.System)
		}
		require.Positive(t, s.TransactionsPerParked, s.System)
		require.Positive(t, s.TransactionsPerEvent, s.System)
		// The test server runs on this machine: both sides' CPU is read, the server's
		// included, for parking and for delivery alike. Twenty workflows take a few
		// clock ticks at most, so a CPU reading may be 0; the allocations, counted
		// exactly, are not.
		for _, c := range []*CPUUse{s.ParkCPU, s.EventCPU} {
			require.NotNil(t, c, s.System)
			require.GreaterOrEqual(t, c.PostgresUS, 0.0, s.System)
			require.GreaterOrEqual(t, c.ProcessUS, 0.0, s.System)
			require.Positive(t, c.ProcessAllocs, s.System)
		}
	}
	require.Equal(t, res.Rounds[0].DBOS, res.Medians[0].DBOS, "the median of one round is that round")
}

// TestEventFloorWritesEveryEvent checks that the floor writes what it claims for every
// parked wait, across batches that do not divide the waits evenly: each wait completed
// with the event recorded, its node and its execution completed.
func TestEventFloorWritesEveryEvent(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"callbacks", "send", "kafka", "kafka-reads"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			s := dbtest.NewSchema(t)
			const events = 250
			f, err := EventFloor(t.Context(), s.URL, path, events, 16, 3)
			require.NoError(t, err)
			rows := 2.0 // the wait with its node's outcome, its execution
			if path == "send" {
				rows = 3 // and the audit row
			}
			read := 0.0
			if path == "kafka-reads" {
				read = 3 // the wait, its execution locked, its node
			}
			require.Equal(t, FloorResult{Path: path, Events: events, Batch: 16, Workers: 3, Seconds: f.Seconds, PerSecond: f.PerSecond, CPU: f.CPU,
				RowsPerEvent: rows, RowsReadPerEvent: read}, f)
			require.Positive(t, f.PerSecond)
			require.NotNil(t, f.CPU, "the test server runs on this machine: its CPU is read")
			// Building and sending a batch's statement allocates; at least its parameters'
			// bytes (two ids an event) are counted.
			require.Greater(t, f.CPU.ProcessAllocBytes, 32.0)
			require.Positive(t, f.CPU.ProcessAllocs)
			pool, err := db.Connect(t.Context(), s.URL, 1)
			require.NoError(t, err)
			defer pool.Close()
			var waits, nodes, execs int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT
				(SELECT count(*) FROM execution_wait_states WHERE status = 'completed' AND json_array_length(received_events) = 1 AND resumed_at IS NOT NULL),
				(SELECT count(*) FROM node_executions WHERE status = 'completed' AND output IS NOT NULL),
				(SELECT count(*) FROM executions WHERE status = 'completed' AND finished_at IS NOT NULL)`).Scan(&waits, &nodes, &execs))
			require.Equal(t, []int{events, events, events}, []int{waits, nodes, execs})
			var audited int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_log AS a JOIN executions AS e ON a.target = 'execution/' || e.id
				WHERE a.action = 'event.send' AND a.outcome = 'delivered'`).Scan(&audited))
			if path == "send" {
				require.Equal(t, events, audited, "a sent event's audit row, for each")
			} else {
				require.Zero(t, audited)
			}
			if !strings.HasPrefix(path, "kafka") {
				return
			}
			// A Kafka record's write also carries its payload, the instance that continued
			// the wait, and the node's output as Output builds it, with the wait's own ids.
			var full int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*)
				FROM execution_wait_states AS w JOIN node_executions AS n USING (execution_id, node_id)
				WHERE w.kafka_event_data->>'correlation_id' = w.correlation_id::text AND w.resumed_by IS NOT NULL
				  AND w.received_events->0->>'name' = 'kafka_event'
				  AND n.output->>'correlation_id' = w.correlation_id::text AND (n.output->'kafkaEvent')::jsonb = w.kafka_event_data::jsonb
				  AND (n.output->'timeout')::jsonb = 'false'`).Scan(&full))
			require.Equal(t, events, full)
		})
	}
}

// TestKafkaPipelineFloorCompletesEveryWait: each floor with the broker produces a record
// per parked wait, fetches each, and completes every wait it addresses by correlation id
// — over polls and statements that do not divide the records evenly. The one with the
// reads reads each wait, its execution and its execution's nodes once.
func TestKafkaPipelineFloorCompletesEveryWait(t *testing.T) {
	t.Parallel()
	for path, reads := range map[string]float64{"kafka-pipeline": 0, "kafka-pipeline-reads": 3} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			s := dbtest.NewSchema(t)
			const records = 250
			f, err := KafkaPipelineFloor(t.Context(), s.URL, path, 3, records, 16, 3)
			require.NoError(t, err)
			require.Equal(t, FloorResult{Path: path, Events: records, Batch: 16, Workers: 3,
				Seconds: f.Seconds, PerSecond: f.PerSecond, CPU: f.CPU, RowsReadPerEvent: reads}, f)
			require.Positive(t, f.PerSecond)
			pool, err := db.Connect(t.Context(), s.URL, 1)
			require.NoError(t, err)
			defer pool.Close()
			var waits, nodes, execs int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT
				(SELECT count(*) FROM execution_wait_states WHERE status = 'completed' AND kafka_event_data->>'correlation_id' = correlation_id::text),
				(SELECT count(*) FROM node_executions WHERE status = 'completed' AND output IS NOT NULL),
				(SELECT count(*) FROM executions WHERE status = 'completed')`).Scan(&waits, &nodes, &execs))
			require.Equal(t, []int{records, records, records}, []int{waits, nodes, execs})
		})
	}
}

func TestGroupBatch(t *testing.T) {
	t.Parallel()
	require.Equal(t, 1, GroupBatch(1, 4, 128))
	require.Equal(t, 2, GroupBatch(8, 4, 128))
	require.Equal(t, 16, GroupBatch(64, 4, 128))
	require.Equal(t, 128, GroupBatch(10_000, 4, 128), "bounded by the largest group")
}

// TestTimeoutFloorWritesWhatTheSweeperWrites: the deadline floor, and the floor with the
// claims before its writes, leave every wait, node and run-queue row exactly as the
// sweeper's timeout under onTimeout fail leaves it, so the lateness ratios compare the
// sweeper with the bare SQL of its own writes, and of its claims and writes.
func TestTimeoutFloorWritesWhatTheSweeperWrites(t *testing.T) {
	t.Parallel()
	s := dbtest.NewSchema(t)
	const due = 40
	pool, err := db.Connect(t.Context(), s.URL, 4)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, parkBare(t.Context(), pool, "bench-deadlines", due, time.Now().Add(time.Hour), `'events', NULL, 'waiting'`))
	past := time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond)
	_, err = pool.Exec(t.Context(), `UPDATE execution_wait_states SET expires_at = $1, next_deadline_at = $1`, past)
	require.NoError(t, err)
	agg, err := aggregator.New(pool, aggregator.Config{InstanceID: "bench", Logger: slog.New(slog.DiscardHandler), SweepBatch: 16, SweepWorkers: 2})
	require.NoError(t, err)
	for {
		n, err := agg.Sweep(t.Context(), time.Now())
		require.NoError(t, err)
		if n == 0 {
			break
		}
	}
	snapshot := func() []string {
		rows, err := pool.Query(t.Context(), `SELECT concat_ws(' | ', w.id, w.status, w.version, w.timed_out_events::text,
				w.next_deadline_at = w.expires_at, w.error, w.received_events::text, n.status, n.output::jsonb::text, n.error,
				coalesce(n.warning, '<null>'), n.finished_at IS NOT NULL,
				(SELECT count(*) FROM run_queue AS r WHERE r.execution_id = w.execution_id AND r.node_id = w.node_id AND r.kind = 'resume'))
			FROM execution_wait_states AS w JOIN node_executions AS n USING (execution_id, node_id) ORDER BY w.id`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return got
	}
	swept := snapshot()
	require.Len(t, swept, due)
	require.Contains(t, swept[0], "| timeout | 2 |")
	// The same rows put back as they were parked, then written by each floor.
	for _, floor := range []func(context.Context, *pgxpool.Pool, int, int) (time.Duration, *CPUUse, error){timeoutFloor, claimedTimeouts} {
		for _, q := range []string{
			`UPDATE execution_wait_states SET status = 'waiting', version = 1, error = NULL, timed_out_events = '[]',
			     next_deadline_at = expires_at, node_status = NULL, node_output = NULL, node_error = NULL,
			     node_warning = NULL, node_finished_at = NULL`,
			`DELETE FROM run_queue`,
		} {
			_, err := pool.Exec(t.Context(), q)
			require.NoError(t, err)
		}
		_, cpu, err := floor(t.Context(), pool, 16, 2)
		require.NoError(t, err)
		require.Equal(t, swept, snapshot())
		require.NotNil(t, cpu, "the test server runs on this machine: its CPU is read")
	}
}

// TestClaimFloorClaimsAsTheSweeper: the floor with the claims sends the sweeper's own
// claim (WaitStateClaimDue), with now() for the replica's clock, so that it stays the
// least a sweeper deciding from the rows it claims takes if that query changes.
func TestClaimFloorClaimsAsTheSweeper(t *testing.T) {
	t.Parallel()
	q, ok := dbtest.Queries(t, "wait_states.sql")["WaitStateClaimDue"]
	require.True(t, ok)
	q = strings.Replace(q, "@now::timestamptz", "now()", 1)
	q = strings.Replace(q, "@max::integer", "$1::integer", 1)
	require.Equal(t, strings.TrimSuffix(strings.TrimSpace(q), ";"), claimDueStmt)
}

// TestMedianDeadlines: each figure is the median of its own runs, not one run's.
func TestMedianDeadlines(t *testing.T) {
	run := func(p99 time.Duration, floor float64) DeadlineResult {
		return DeadlineResult{Kind: "events", Due: 10, Lateness: Latencies{P50: p99 / 2, P99: p99, Max: p99 + time.Second},
			Seconds: p99.Seconds(), PerSecond: 10 / p99.Seconds(), FloorSeconds: floor, ClaimFloorSeconds: 2 * floor}
	}
	got := MedianDeadlines([]DeadlineResult{run(5*time.Second, 2), run(7*time.Second, 4), run(6*time.Second, 3.5)})
	require.Equal(t, 6*time.Second, got.Lateness.P99)
	require.Equal(t, 3*time.Second, got.Lateness.P50)
	require.Equal(t, 7*time.Second, got.Lateness.Max)
	require.Equal(t, 3.5, got.FloorSeconds)
	require.Equal(t, 7.0, got.ClaimFloorSeconds)
	require.Equal(t, 6.0, got.Seconds)
	require.Equal(t, "events", got.Kind)
	require.Zero(t, MedianDeadlines(nil).Due)
	require.Nil(t, got.CPU, "no run read its CPU")

	// Each share of the CPU at its own median; none at all when one run could not read it.
	runs := []DeadlineResult{run(5*time.Second, 2), run(7*time.Second, 4), run(6*time.Second, 3.5)}
	for i, c := range []CPUUse{{PostgresUS: 40, ProcessUS: 9, ProcessAllocs: 30, ProcessAllocBytes: 900},
		{PostgresUS: 50, ProcessUS: 7, ProcessAllocs: 10, ProcessAllocBytes: 700}, {PostgresUS: 45, ProcessUS: 8, ProcessAllocs: 20, ProcessAllocBytes: 800}} {
		runs[i].CPU, runs[i].FloorCPU = &c, &CPUUse{PostgresUS: c.PostgresUS - 5}
		runs[i].ClaimFloorCPU = &CPUUse{PostgresUS: c.PostgresUS - 2}
	}
	got = MedianDeadlines(runs)
	require.Equal(t, &CPUUse{PostgresUS: 43}, got.ClaimFloorCPU)
	require.Equal(t, &CPUUse{PostgresUS: 45, ProcessUS: 8, ProcessAllocs: 20, ProcessAllocBytes: 800}, got.CPU)
	require.Equal(t, &CPUUse{PostgresUS: 40}, got.FloorCPU)
	runs[1].FloorCPU = nil
	require.Nil(t, MedianDeadlines(runs).FloorCPU)
}
