// Command rendezvous-bench measures rendezvous against a baseline run in the same
// process on the same database, and prints every figure with its ratio to the baseline
// and its target. Figures from shared machines are noisy; the ratio is what to compare.
//
// The parts: (a) the baseline, a versioned UPDATE loop; (b) Kafka
// records applied per second; (c) callbacks correlated per second; (d) produce or
// callback → continuation latency at a fixed offered rate of half of each path's maximum,
// (b) or (c); (e) a burst of
// deadlines due at once; (f) (b) again with a million other waits in the table; (m)
// payload-matched events; (p) the peers, DBOS Transact and Temporal, parking workflows
// and delivering one event to each side by side with rendezvous.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/harness/bench"
	"github.com/rendezvous-run/rendezvous/internal/gctune"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
)

// parts are the names --only accepts, in the order they run.
var parts = []string{"peer", "callbacks", "kafka", "filled", "latency", "deadlines", "timers", "match"}

// options are the command's flags.
type options struct {
	url          string
	concurrency  int
	waits        int
	records      int
	partitions   int
	baselineFor  time.Duration
	rounds       int
	due          int
	sweepWorkers int
	sweepBatch   int
	filled       int
	latencyFor   time.Duration
	latencyRate  float64
	latencyLoad  float64
	matchSmall   int
	matchLarge   int
	matchEvents  int
	lookback     time.Duration
	wideClients  int
	peerFlows    int
	peerSenders  []int
	peerRounds   int
	peerTemporal string
	peerConns    int
	dueRounds    int
	only         map[string]bool
	out          string
	logLevel     slog.Level
	logFile      string
}

func main() {
	var o options
	flag.StringVar(&o.url, "database-url", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL server (throwaway schemas are created and dropped)")
	flag.IntVar(&o.concurrency, "concurrency", 8, "concurrent clients, for the baseline and the callbacks alike")
	flag.IntVar(&o.waits, "waits", 4000, "(c) waits answered by callbacks")
	flag.IntVar(&o.wideClients, "callback-clients", 64, "(c) concurrent clients of the second callbacks run, which the service rather than the clients' round trips bounds; 0 skips it")
	flag.IntVar(&o.records, "records", 20000, "(b, f) Kafka records per run (one per wait)")
	flag.IntVar(&o.partitions, "partitions", 8, "partitions of the Kafka topic")
	flag.DurationVar(&o.baselineFor, "baseline-duration", 5*time.Second, "(a) how long the baseline loop runs")
	flag.IntVar(&o.rounds, "kafka-rounds", 3, "(b, f) rounds of Kafka runs — without an exporter (spans not recorded, serve's default), tracing on, tracing on with the filled table — the median of each is reported")
	flag.IntVar(&o.due, "due", 100000, "(e) waits whose deadline falls at the same moment")
	flag.IntVar(&o.dueRounds, "deadline-rounds", 3, "(e) runs of the deadline burst, each with its floor; each figure is the median of its runs")
	flag.IntVar(&o.sweepWorkers, "sweep-workers", aggregator.SweepWorkersDefault, "(e) sweeper transactions in flight")
	flag.IntVar(&o.sweepBatch, "sweep-batch", aggregator.SweepBatchDefault, "(e) due waits decided per sweeper transaction")
	flag.IntVar(&o.filled, "filled", 1000000, "(f) waiting rows of other executions in the table")
	flag.DurationVar(&o.latencyFor, "latency-duration", 10*time.Second, "(d) how long events are offered at the fixed rate, per path")
	flag.Float64Var(&o.latencyRate, "latency-rate", 0, "(d) offered events per second; 0 means --latency-load × (b) for Kafka, × (c) for callbacks")
	flag.Float64Var(&o.latencyLoad, "latency-load", 0.5, "(d) offered rate as a share of the path's measured maximum, (b) or (c)")
	flag.IntVar(&o.matchSmall, "match-small", 10000, "(m) open waits in the table, small run")
	flag.IntVar(&o.matchLarge, "match-large", 1000000, "(m) open waits in the table, large run")
	flag.IntVar(&o.matchEvents, "match-events", 5000, "(m) events correlated by payload, each completing one of the open waits")
	flag.DurationVar(&o.lookback, "match-lookback", 10*time.Minute, "(m) lookback of the small run's second pass, which also keeps and takes as many early records; 0 skips it")
	flag.IntVar(&o.peerFlows, "peer-workflows", 2000, "(p) workflows each system parks and then delivers one event to, per round and number of senders")
	peerSenders := flag.String("peer-senders", "8,64", "(p) concurrent starters and senders, comma-separated; each number is a run of both systems per round")
	flag.IntVar(&o.peerRounds, "peer-rounds", 5, "(p) interleaved rounds of every system; each figure is the median of its rounds")
	flag.IntVar(&o.peerConns, "peer-conns", bench.PeerConnsDefault, "(p) each system's connections to PostgreSQL (Temporal: half of it for each of its three services' main store)")
	flag.StringVar(&o.peerTemporal, "peer-temporal", bench.TemporalDirDefault, "(p) the Temporal runner's module, built with the go command and run as a process of its own; empty leaves Temporal out")
	only := flag.String("only", "", "run only these parts besides the baseline, comma-separated: "+strings.Join(parts, ", "))
	flag.StringVar(&o.out, "json", "", "also write the results to this file")
	flag.TextVar(&o.logLevel, "log-level", telemetry.DefaultLogLevel, "level of the replicas' (and the peer's) log lines: debug, info, warn, error; the default is serve's")
	flag.StringVar(&o.logFile, "log-file", os.DevNull, "where the replicas' log lines go, in serve's default format: a replica pays for every line it logs, as in production")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memprofile := flag.String("memprofile", "", "write a profile of the whole run's allocations to this file")
	writeDocsTo := flag.String("write-docs", "", "run nothing: rewrite the figures block of this markdown file (docs/benchmarks.md) from the results file --json names")
	flag.Parse()
	if *writeDocsTo != "" {
		if o.out == "" {
			fmt.Fprintln(os.Stderr, "rendezvous-bench: --write-docs needs --json, the results file of a run")
			os.Exit(2)
		}
		if err := writeDocs(*writeDocsTo, o.out); err != nil {
			fmt.Fprintln(os.Stderr, "rendezvous-bench:", err)
			os.Exit(1)
		}
		return
	}
	o.rounds = max(o.rounds, 1)
	o.peerRounds = max(o.peerRounds, 1)
	o.dueRounds = max(o.dueRounds, 1)
	for f := range strings.SplitSeq(*peerSenders, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			fmt.Fprintf(os.Stderr, "rendezvous-bench: --peer-senders: %q is not a positive number\n", f)
			os.Exit(2)
		}
		o.peerSenders = append(o.peerSenders, c)
	}
	if *only != "" {
		o.only = map[string]bool{}
		for p := range strings.SplitSeq(*only, ",") {
			p = strings.TrimSpace(p)
			if !slices.Contains(parts, p) {
				fmt.Fprintf(os.Stderr, "rendezvous-bench: --only: unknown part %q (want %s)\n", p, strings.Join(parts, ", "))
				os.Exit(2)
			}
			o.only[p] = true
		}
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rendezvous-bench:", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	// The replicas measured here run in this process, so it runs with the collector
	// settings a replica's process runs with (the peer, in the same process, too).
	gc := gctune.Apply()
	fmt.Printf("garbage collector: GOGC %s; memory limit %s\n", gc.GOGC(), gc.MemoryLimit())
	fmt.Printf("logs: %s and above, %s, to %s (serve logs at %s by default; --log-level, --log-file)\n",
		strings.ToLower(o.logLevel.String()), telemetry.DefaultLogFormat, o.logFile, strings.ToLower(telemetry.DefaultLogLevel.String()))
	start := time.Now()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "rendezvous-bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
	fmt.Printf("\nwhole run: %s\n", time.Since(start).Round(time.Second))
	if *memprofile != "" {
		if err := writeAllocs(*memprofile); err != nil {
			fmt.Fprintln(os.Stderr, "rendezvous-bench:", err)
			os.Exit(1)
		}
	}
}

// writeAllocs writes the allocations made since the process started (pprof's allocs
// profile) to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// runs reports whether a part is to run.
func (o options) runs(part string) bool { return o.only == nil || o.only[part] }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// results is the JSON file: every part's detail, and the figures of the table.
type results struct {
	// LogLevel is the level the replicas logged at (--log-level).
	LogLevel string `json:"log_level"`
	// Stamp is when the run started and on which commit.
	Stamp     runStamp             `json:"stamp"`
	Figures   []figure             `json:"figures"`
	Baseline  bench.BaselineResult `json:"baseline"`
	Callbacks bench.CallbackResult `json:"callbacks"`
	Ratio     float64              `json:"callbacks_to_baseline"`
	// CallbacksWide is (c) again with --callback-clients: (c) at the baseline's 8
	// clients is bound by each client's round trip, this by the service.
	CallbacksWide bench.CallbackResult `json:"callbacks_wide"`
	Kafka         bench.KafkaResult    `json:"kafka"`
	KafkaRatio    float64              `json:"kafka_to_baseline"`
	// KafkaUntraced is the same run without a trace exporter (spans keep their ids but
	// are not recorded, as in a replica with no OTLP endpoint); TracingCost is the share
	// of throughput recording and exporting spans costs (1 − traced / untraced).
	KafkaUntraced bench.KafkaResult `json:"kafka_untraced"`
	TracingCost   float64           `json:"tracing_cost"`
	// KafkaRuns and KafkaFilledRuns are every round's traced runs, of which Kafka and
	// KafkaFilled are the medians.
	KafkaRuns []bench.KafkaResult `json:"kafka_runs"`
	// Fill is how the table of (f) was filled; KafkaFilled is (b) run on it, and
	// FilledToKafka its throughput against (b)'s.
	Fill            bench.FillResult    `json:"fill"`
	KafkaFilled     bench.KafkaResult   `json:"kafka_filled"`
	KafkaFilledRuns []bench.KafkaResult `json:"kafka_filled_runs"`
	FilledToKafka   float64             `json:"filled_to_kafka"`
	// KafkaLatency and CallbackLatency are (d), at a fixed offered rate.
	KafkaLatency    bench.LatencyResult `json:"kafka_latency"`
	CallbackLatency bench.LatencyResult `json:"callback_latency"`
	// CallbackLatencyOffered says what the callbacks' rate in (d) is a share of: their own
	// maximum, (c), when (c) ran.
	CallbackLatencyOffered string               `json:"callback_latency_offered"`
	Deadlines              bench.DeadlineResult `json:"deadlines"`
	// DeadlineRuns are the runs Deadlines is the median of.
	DeadlineRuns []bench.DeadlineResult `json:"deadline_runs"`
	// DeadlineRatio: timed-out waits per second against the baseline's updates per second.
	DeadlineRatio float64 `json:"deadlines_to_baseline"`
	// Timers: the same burst of wait-node timers resuming.
	Timers     bench.DeadlineResult `json:"timers"`
	TimerRatio float64              `json:"timers_to_baseline"`
	// MatchSmall and MatchLarge are payload-matched events with few and many open waits
	// in the table; MatchLargeToSmall the ratio of their throughputs.
	MatchSmall        bench.MatchResult `json:"match_small"`
	MatchLarge        bench.MatchResult `json:"match_large"`
	MatchLargeToSmall float64           `json:"match_large_to_small"`
	// MatchSmallLookback is MatchSmall again with the match's lookback on;
	// LookbackToPlain the ratio of their throughputs (what lookback costs records that
	// find their waits).
	MatchSmallLookback bench.MatchResult `json:"match_small_lookback"`
	LookbackToPlain    float64           `json:"match_lookback_to_plain"`
	// KafkaFloor, CallbacksFloor, CallbacksWideFloor and SendFloors are the bare writes
	// of the same events' rows, in the service's batches at its concurrency (SendFloors:
	// one per number of peer senders).
	KafkaFloor bench.FloorResult `json:"kafka_floor"`
	// KafkaPipelineFloor is the Kafka floor with the broker, the producer and a bare
	// consumer on the same cores, as every Kafka run has them.
	KafkaPipelineFloor bench.FloorResult `json:"kafka_pipeline_floor"`
	// KafkaReadsFloor is the Kafka floor with the rows a decision reads first: the
	// waits, their executions locked, their nodes.
	KafkaReadsFloor bench.FloorResult `json:"kafka_reads_floor"`
	// KafkaPipelineReadsFloor is both: the Kafka floor with the reads, fed by the bare
	// consumer of KafkaPipelineFloor. It is the bare SQL of the Kafka path as the service
	// sends it, with everything a Kafka run carries besides the replica's own work.
	KafkaPipelineReadsFloor bench.FloorResult   `json:"kafka_pipeline_reads_floor"`
	CallbacksFloor          bench.FloorResult   `json:"callbacks_floor"`
	CallbacksWideFloor      bench.FloorResult   `json:"callbacks_wide_floor"`
	SendFloors              []bench.FloorResult `json:"send_floors"`
	// Peer is (p): rendezvous, DBOS Transact and Temporal parking workflows and
	// delivering one event to each, side by side.
	Peer bench.PeerResult `json:"peer"`
}

func run(ctx context.Context, o options) error {
	// Every part gets a schema of its own, so its waits are the only ones there (but for
	// the filled table's million).
	var schemas []*bench.Schema
	defer func() {
		for _, s := range schemas {
			s.Drop()
		}
	}()
	newSchema := func() (*bench.Schema, error) {
		s, err := bench.NewSchema(ctx, o.url)
		if err != nil {
			return nil, fmt.Errorf("schema: %w", err)
		}
		schemas = append(schemas, s)
		return s, nil
	}
	logs, err := os.OpenFile(o.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("--log-file: %w", err)
	}
	defer logs.Close()
	logger, err := telemetry.NewLogger(logs, o.logLevel, telemetry.DefaultLogFormat)
	if err != nil {
		return err
	}
	r := results{LogLevel: strings.ToLower(o.logLevel.String()), Stamp: stampNow()}

	schema, err := newSchema()
	if err != nil {
		return err
	}
	pool, err := db.Connect(ctx, schema.URL, int32(o.concurrency+2))
	if err != nil {
		return err
	}
	fmt.Printf("(a) baseline: UPDATE … WHERE version = $v loop, %d connections, %s …\n", o.concurrency, o.baselineFor)
	r.Baseline, err = bench.Baseline(ctx, pool, o.concurrency, o.baselineFor)
	pool.Close()
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}

	if o.runs("peer") {
		systems := "rendezvous and DBOS"
		if o.peerTemporal != "" {
			systems = "rendezvous, DBOS and Temporal (its runner built from " + o.peerTemporal + " first)"
		}
		fmt.Printf("(p) peer: %s each park %d workflows and deliver one event to each, senders %v, %d interleaved rounds …\n",
			systems, o.peerFlows, o.peerSenders, o.peerRounds)
		if r.Peer, err = bench.Peer(ctx, o.url, o.peerFlows, o.peerSenders, o.peerRounds, o.peerConns, o.peerTemporal, logger); err != nil {
			return fmt.Errorf("peer: %w", err)
		}
		for _, c := range o.peerSenders {
			f, err := eventFloor(ctx, newSchema, "send", o.peerFlows, groupBatch(c), aggregator.DefaultApplyGroups())
			if err != nil {
				return err
			}
			r.SendFloors = append(r.SendFloors, f)
		}
	}

	if o.runs("callbacks") {
		fmt.Printf("(c) callbacks: %d waits answered by %d concurrent clients …\n", o.waits, o.concurrency)
		if r.Callbacks, err = bench.Callbacks(ctx, schema.URL, o.concurrency, o.waits, logger); err != nil {
			return fmt.Errorf("callbacks: %w", err)
		}
		if o.wideClients > 0 {
			fmt.Printf("(c) callbacks: %d waits answered by %d concurrent clients …\n", 2*o.waits, o.wideClients)
			if r.CallbacksWide, err = bench.Callbacks(ctx, schema.URL, o.wideClients, 2*o.waits, logger); err != nil {
				return fmt.Errorf("callbacks: %w", err)
			}
			if r.CallbacksWideFloor, err = eventFloor(ctx, newSchema, "callbacks", 2*o.waits, groupBatch(o.wideClients), aggregator.DefaultApplyGroups()); err != nil {
				return err
			}
		}
		if r.CallbacksFloor, err = eventFloor(ctx, newSchema, "callbacks", o.waits, groupBatch(o.concurrency), aggregator.DefaultApplyGroups()); err != nil {
			return err
		}
	}

	// (b) and (f) alternate, round by round, so that a neighbour's burst on a shared
	// machine hits both alike rather than one of them; each is the median of its rounds.
	// (f) needs (b) for its ratio, and (d) needs (b) for its rate.
	needB := o.runs("kafka") || o.runs("filled") || (o.runs("latency") && o.latencyRate <= 0)
	var filled *bench.Schema
	if o.runs("filled") {
		if filled, err = newSchema(); err != nil {
			return err
		}
		fmt.Printf("(f) filling: %d waiting rows …\n", o.filled)
		if r.Fill, err = bench.Fill(ctx, filled.URL, o.filled, logger); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
		fmt.Printf("    %d waiting rows in %.1f s, execution_wait_states %d MB with indexes\n", r.Fill.Waits, r.Fill.Seconds, r.Fill.TableBytes>>20)
	}
	if needB {
		rounds := o.rounds
		if !o.runs("kafka") && !o.runs("filled") {
			rounds = 1 // only (d)'s rate is wanted
		}
		var offs []bench.KafkaResult
		var floors [4][]bench.FloorResult // bare writes, with the reads, with the broker, with both
		for range rounds {
			if o.runs("kafka") {
				s, err := newSchema()
				if err != nil {
					return err
				}
				fmt.Printf("(b) kafka: %d records over %d partitions, no trace exporter …\n", o.records, o.partitions)
				res, err := bench.Kafka(ctx, s.URL, o.partitions, o.records, false, logger)
				if err != nil {
					return fmt.Errorf("kafka: %w", err)
				}
				offs = append(offs, res)
			}
			s, err := newSchema()
			if err != nil {
				return err
			}
			fmt.Printf("(b) kafka: %d records over %d partitions, tracing on …\n", o.records, o.partitions)
			res, err := bench.Kafka(ctx, s.URL, o.partitions, o.records, true, logger)
			if err != nil {
				return fmt.Errorf("kafka: %w", err)
			}
			r.KafkaRuns = append(r.KafkaRuns, res)
			if filled != nil {
				fmt.Printf("(f) kafka: %d records over %d partitions, tracing on, %d other waits in the table …\n", o.records, o.partitions, r.Fill.Waits)
				res, err := bench.Kafka(ctx, filled.URL, o.partitions, o.records, true, logger)
				if err != nil {
					return fmt.Errorf("kafka, filled table: %w", err)
				}
				r.KafkaFilledRuns = append(r.KafkaFilledRuns, res)
			}
			if o.runs("kafka") {
				// The floors run every round too, beside the runs they are the floors of:
				// each ratio is a median over medians, not over one run of its floor.
				f, err := kafkaFloors(ctx, newSchema, o)
				if err != nil {
					return err
				}
				for i := range floors {
					floors[i] = append(floors[i], f[i])
				}
			}
		}
		if len(floors[0]) > 0 {
			r.KafkaFloor, r.KafkaReadsFloor, r.KafkaPipelineFloor, r.KafkaPipelineReadsFloor =
				medianFloor(floors[0]), medianFloor(floors[1]), medianFloor(floors[2]), medianFloor(floors[3])
		}
		r.Kafka = medianRun(r.KafkaRuns)
		r.KafkaRatio = r.Kafka.PerSecond / r.Baseline.PerSecond
		if len(offs) > 0 {
			r.KafkaUntraced = medianRun(offs)
			r.TracingCost = 1 - r.Kafka.PerSecond/r.KafkaUntraced.PerSecond
		}
		if len(r.KafkaFilledRuns) > 0 {
			r.KafkaFilled = medianRun(r.KafkaFilledRuns)
			r.FilledToKafka = r.KafkaFilled.PerSecond / r.Kafka.PerSecond
		}
	}

	if o.runs("latency") {
		rate := o.latencyRate
		if rate <= 0 {
			rate = o.latencyLoad * r.Kafka.PerSecond
		}
		s, err := newSchema()
		if err != nil {
			return err
		}
		fmt.Printf("(d) kafka: %.0f records/s offered for %s, open loop …\n", rate, o.latencyFor)
		if r.KafkaLatency, err = bench.KafkaLatency(ctx, s.URL, o.partitions, rate, o.latencyFor, logger); err != nil {
			return fmt.Errorf("kafka latency: %w", err)
		}
		if s, err = newSchema(); err != nil {
			return err
		}
		// Each path is offered the same share of its own maximum: callbacks sustain a
		// fraction of Kafka's rate, and half of Kafka's would measure a queue growing for
		// the whole run rather than latency under load. Without (c) in the run, Kafka's
		// rate stands in.
		offered := "a fixed rate"
		if o.latencyRate <= 0 {
			offered = fmt.Sprintf("%.2f of (b)", o.latencyLoad)
			if most := max(r.Callbacks.PerSecond, r.CallbacksWide.PerSecond); most > 0 {
				rate, offered = o.latencyLoad*most, fmt.Sprintf("%.2f of (c)", o.latencyLoad)
			}
		}
		r.CallbackLatencyOffered = offered
		fmt.Printf("(d) callbacks: %.0f callbacks/s offered (%s) for %s, open loop …\n", rate, offered, o.latencyFor)
		if r.CallbackLatency, err = bench.CallbackLatency(ctx, s.URL, rate, o.latencyFor, logger); err != nil {
			return fmt.Errorf("callback latency: %w", err)
		}
	}

	if o.runs("deadlines") {
		for range o.dueRounds {
			s, err := newSchema()
			if err != nil {
				return err
			}
			fmt.Printf("(e) deadlines: %d waits due at the same moment, %d sweeper transactions in flight …\n", o.due, o.sweepWorkers)
			d, err := bench.Deadlines(ctx, s.URL, o.due, o.sweepWorkers, o.sweepBatch, false, logger)
			if err != nil {
				return fmt.Errorf("deadlines: %w", err)
			}
			r.DeadlineRuns = append(r.DeadlineRuns, d)
		}
		r.Deadlines = bench.MedianDeadlines(r.DeadlineRuns)
		r.DeadlineRatio = r.Deadlines.PerSecond / r.Baseline.PerSecond
	}
	if o.runs("timers") {
		s, err := newSchema()
		if err != nil {
			return err
		}
		fmt.Printf("(e) timers: %d wait-node timers due at the same moment, %d sweeper transactions in flight …\n", o.due, o.sweepWorkers)
		if r.Timers, err = bench.Deadlines(ctx, s.URL, o.due, o.sweepWorkers, o.sweepBatch, true, logger); err != nil {
			return fmt.Errorf("timers: %w", err)
		}
		r.TimerRatio = r.Timers.PerSecond / r.Baseline.PerSecond
	}
	if o.runs("match") {
		type matchRun struct {
			dst      *bench.MatchResult
			waiting  int
			lookback time.Duration
		}
		runs := []matchRun{{&r.MatchSmall, o.matchSmall, 0}}
		if o.lookback > 0 {
			runs = append(runs, matchRun{&r.MatchSmallLookback, o.matchSmall, o.lookback})
		}
		if o.matchLarge > 0 {
			runs = append(runs, matchRun{&r.MatchLarge, o.matchLarge, 0})
		}
		for _, run := range runs {
			s, err := newSchema()
			if err != nil {
				return err
			}
			with := ""
			if run.lookback > 0 {
				with = fmt.Sprintf(" with lookback %s (then as many early records kept and taken)", run.lookback)
			}
			fmt.Printf("(m) payload match: %d events, each completing one of %d open waits%s …\n", o.matchEvents, run.waiting, with)
			if *run.dst, err = bench.Match(ctx, s.URL, run.waiting, o.matchEvents, o.concurrency, run.lookback, logger); err != nil {
				return fmt.Errorf("match: %w", err)
			}
		}
		if r.MatchLarge.Matched > 0 {
			r.MatchLargeToSmall = r.MatchLarge.PerSecond / r.MatchSmall.PerSecond
		}
		if r.MatchSmallLookback.Matched > 0 {
			r.LookbackToPlain = r.MatchSmallLookback.PerSecond / r.MatchSmall.PerSecond
		}
	}
	if r.Callbacks.Waits > 0 {
		r.Ratio = r.Callbacks.PerSecond / r.Baseline.PerSecond
	}

	r.Figures = figures(o, r)
	fmt.Println()
	printTable(os.Stdout, r.Figures)
	printStages(os.Stdout, r.KafkaLatency, r.CallbackLatency)
	if o.out != "" {
		raw, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.out, raw, 0o644); err != nil {
			return fmt.Errorf("write results: %w", err)
		}
	}
	return nil
}

// groupBatch is the batch the aggregator's group commit forms with clients in flight.
func groupBatch(clients int) int {
	return bench.GroupBatch(clients, aggregator.DefaultApplyGroups(), aggregator.MaxGroupDefault)
}

// kafkaFloors measures (b)'s four floors, each on a schema of its own: the bare writes,
// the writes with the reads, the writes with the broker, and the writes with both.
func kafkaFloors(ctx context.Context, newSchema func() (*bench.Schema, error), o options) ([4]bench.FloorResult, error) {
	var f [4]bench.FloorResult
	var err error
	if f[0], err = eventFloor(ctx, newSchema, "kafka", o.records, consumer.BatchSizeDefault, consumer.LanesDefault); err != nil {
		return f, err
	}
	fmt.Printf("    floor with the reads: the waits read by correlation id, their executions locked, the bare writes, their nodes read; %d a transaction, %d at once …\n",
		consumer.BatchSizeDefault, consumer.LanesDefault)
	if f[1], err = eventFloor(ctx, newSchema, "kafka-reads", o.records, consumer.BatchSizeDefault, consumer.LanesDefault); err != nil {
		return f, err
	}
	for i, p := range []struct{ path, name, says string }{
		{"kafka-pipeline", "floor with the broker", "bare writes by correlation id"},
		{"kafka-pipeline-reads", "floor with the reads and the broker", "the floor with the reads by correlation id"},
	} {
		s, err := newSchema()
		if err != nil {
			return f, err
		}
		fmt.Printf("    %s: the same records produced, fetched by a bare consumer, %s, %d a transaction, %d at once …\n",
			p.name, p.says, consumer.BatchSizeDefault, consumer.LanesDefault)
		if f[2+i], err = bench.KafkaPipelineFloor(ctx, s.URL, p.path, o.partitions, o.records, consumer.BatchSizeDefault, consumer.LanesDefault); err != nil {
			return f, fmt.Errorf("floor: %w", err)
		}
	}
	return f, nil
}

// medianFloor is the run of a floor at the median rate, with how many runs it is the
// median of.
func medianFloor(runs []bench.FloorResult) bench.FloorResult {
	s := slices.Clone(runs)
	slices.SortFunc(s, func(a, b bench.FloorResult) int { return cmp.Compare(a.PerSecond, b.PerSecond) })
	m := s[len(s)/2]
	m.Runs = len(runs)
	return m
}

// eventFloor measures a path's floor on a schema of its own.
func eventFloor(ctx context.Context, newSchema func() (*bench.Schema, error), path string, events, batch, workers int) (bench.FloorResult, error) {
	s, err := newSchema()
	if err != nil {
		return bench.FloorResult{}, err
	}
	fmt.Printf("    floor: bare writes of %d %s events' rows, %d a statement, %d at once …\n", events, path, batch, workers)
	f, err := bench.EventFloor(ctx, s.URL, path, events, batch, workers)
	if err != nil {
		return bench.FloorResult{}, fmt.Errorf("floor: %w", err)
	}
	return f, nil
}

// medianRun is the run with the median throughput.
func medianRun(runs []bench.KafkaResult) bench.KafkaResult {
	s := slices.Clone(runs)
	slices.SortFunc(s, func(a, b bench.KafkaResult) int { return cmp.Compare(a.PerSecond, b.PerSecond) })
	return s[len(s)/2]
}
