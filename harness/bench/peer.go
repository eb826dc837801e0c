package bench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/server/auth"
)

// PeerSystem names the system a peer figure is of.
type PeerSystem string

// The systems of the peer comparison.
const (
	PeerRendezvous PeerSystem = "rendezvous"
	PeerDBOS       PeerSystem = "dbos"
	PeerTemporal   PeerSystem = "temporal"
)

// PeerConnsDefault is both systems' connection pool size by default: the service's
// default, so that neither has more connections to the server than the other.
const PeerConnsDefault = server.DBMaxConnsDefault

// PeerSide is one system's figures for one round at one number of senders.
type PeerSide struct {
	System  PeerSystem `json:"system"`
	Senders int        `json:"senders"`
	// ParkedPerSecond: workflows started by Senders concurrent starters, from the first
	// start until the last of them waits for its event (its wait committed).
	ParkedPerSecond float64 `json:"parked_per_second"`
	// EventsPerSecond: events sent by Senders concurrent senders, one per parked
	// workflow, from the first send until the last workflow completed (committed).
	EventsPerSecond float64 `json:"events_per_second"`
	// SendToCompletion: from a send's start to its workflow's completion: the start of
	// the completing transaction as stamped inside it (DBOS stamps milliseconds), or the
	// send's return when that is later — a workflow completed in the send's own
	// transaction has committed only once the send returns.
	SendToCompletion Latencies `json:"send_to_completion"`
	// Rows are tuples inserted, updated and deleted in the system's tables, and
	// Transactions those committed or rolled back in its database, per parked workflow
	// and per delivered event (from pg_stat_user_tables and pg_stat_database, the bench's
	// own probes taken out). Background loops running meanwhile count: they are part of
	// the system's cost.
	RowsPerParked         float64 `json:"rows_per_parked"`
	TransactionsPerParked float64 `json:"transactions_per_parked"`
	RowsPerEvent          float64 `json:"rows_per_event"`
	TransactionsPerEvent  float64 `json:"transactions_per_event"`
	// ParkCPU and EventCPU are the CPU per parked workflow and per delivered event of
	// PostgreSQL (the whole server, the bench's polling for parked and completed
	// workflows included, as for both systems) and of this process (the system, its
	// starters or senders, and the other system, idle meanwhile). Set against the rate,
	// they tell a system bound by the machine's cores from one bound by waiting. Nil
	// where the server's CPU cannot be read (startCPU).
	ParkCPU  *CPUUse `json:"park_cpu,omitempty"`
	EventCPU *CPUUse `json:"event_cpu,omitempty"`
}

// PeerRound is one round at one number of senders: every system, one after the other.
type PeerRound struct {
	Senders    int      `json:"senders"`
	Rendezvous PeerSide `json:"rendezvous"`
	DBOS       PeerSide `json:"dbos"`
	// Temporal is nil when the run leaves Temporal out.
	Temporal *PeerSide `json:"temporal,omitempty"`
}

// PeerResult is the peer comparison: every round, and per number of senders the
// medians of its rounds.
type PeerResult struct {
	Workflows int         `json:"workflows"`
	Rounds    []PeerRound `json:"rounds"`
	// Medians has one entry per number of senders, each figure the median of its rounds
	// taken on its own.
	Medians []PeerRound `json:"medians"`
}

// Peer measures rendezvous against DBOS Transact and, when temporalDir names the
// Temporal runner's module (harness/bench/temporal), against Temporal, on the same
// server: each in a database of its own, created here and dropped at the end. Each
// round, for each number of senders, each system parks workflows workflows (a rendezvous
// wait_events node waiting for an event sent by type; a DBOS workflow parked on Recv; a
// Temporal workflow blocked on a signal channel's Receive), then delivers one event to
// each (rendezvous through POST /api/v1/executions/{id}/events over loopback HTTP, as a
// real sender would; DBOS through Send; Temporal through SignalWorkflow) from that many
// concurrent senders. Which system goes first rotates round by round, so that a
// neighbour's burst on a shared machine hits each alike.
//
// conns is each system's connection pool size (0: PeerConnsDefault); tests run it small,
// beside the suite's other packages on one server.
func Peer(ctx context.Context, serverURL string, workflows int, senders []int, rounds, conns int, temporalDir string, logger *slog.Logger) (PeerResult, error) {
	if conns <= 0 {
		conns = PeerConnsDefault
	}
	rdvDB, err := newDatabase(ctx, serverURL, "rdv_bench_rdv_")
	if err != nil {
		return PeerResult{}, err
	}
	defer rdvDB.drop()
	dbosDB, err := newDatabase(ctx, serverURL, "rdv_bench_dbos_")
	if err != nil {
		return PeerResult{}, err
	}
	defer dbosDB.drop()

	rdv, err := startRendezvousPeer(ctx, rdvDB.url, conns, logger)
	if err != nil {
		return PeerResult{}, fmt.Errorf("rendezvous: %w", err)
	}
	defer rdv.close()
	peer, err := startDBOSPeer(ctx, dbosDB.url, conns, logger)
	if err != nil {
		return PeerResult{}, fmt.Errorf("dbos: %w", err)
	}
	defer peer.close()
	var tmp *temporalPeer
	if temporalDir != "" {
		tmpDB, err := newDatabase(ctx, serverURL, "rdv_bench_temporal_")
		if err != nil {
			return PeerResult{}, err
		}
		defer tmpDB.drop()
		if tmp, err = startTemporalPeer(ctx, temporalDir, tmpDB.url, conns); err != nil {
			return PeerResult{}, fmt.Errorf("temporal: %w", err)
		}
		defer tmp.close()
	}

	res := PeerResult{Workflows: workflows}
	for round := range rounds {
		for _, c := range senders {
			r := PeerRound{Senders: c}
			type side struct {
				dst *PeerSide
				sys peerRunner
			}
			sides := []side{{&r.Rendezvous, rdv}, {&r.DBOS, peer}}
			if tmp != nil {
				r.Temporal = &PeerSide{}
				sides = append(sides, side{r.Temporal, tmp})
			}
			// Rotated by one each round: with two systems, each goes first every other
			// round; with three, every third.
			k := round % len(sides)
			sides = append(sides[k:], sides[:k]...)
			for _, s := range sides {
				if *s.dst, err = runPeerSide(ctx, s.sys, workflows, c); err != nil {
					return PeerResult{}, err
				}
			}
			res.Rounds = append(res.Rounds, r)
		}
	}
	for _, c := range senders {
		var rdvSides, dbosSides, tmpSides []PeerSide
		for _, r := range res.Rounds {
			if r.Senders == c {
				rdvSides, dbosSides = append(rdvSides, r.Rendezvous), append(dbosSides, r.DBOS)
				if r.Temporal != nil {
					tmpSides = append(tmpSides, *r.Temporal)
				}
			}
		}
		m := PeerRound{Senders: c, Rendezvous: medianSide(rdvSides), DBOS: medianSide(dbosSides)}
		if len(tmpSides) > 0 {
			t := medianSide(tmpSides)
			m.Temporal = &t
		}
		res.Medians = append(res.Medians, m)
	}
	return res, nil
}

// peerRunner is what a round needs of a system, besides its phases (phasesOf).
type peerRunner interface {
	name() PeerSystem
	// countParked counts the workflows of ids that wait for their event.
	countParked(ctx context.Context, probe *probe, ids []string) (int, error)
	// completions returns when each of ids completed, once all have.
	completions(ctx context.Context, probe *probe, ids []string) ([]time.Time, error)
	// pool is a connection pool to the system's database: the system's own, whose idle
	// connections snapshot touches, or (a system in a process of its own) one the bench
	// opened there to read the server's CPU and log position.
	pool() *pgxpool.Pool
	// probe is the bench's connection to the system's database.
	probe() *probe
}

// runPeerSide parks workflows with c concurrent starters, then delivers one event to
// each with c concurrent senders.
func runPeerSide(ctx context.Context, sys peerRunner, workflows, c int) (PeerSide, error) {
	side := PeerSide{System: sys.name(), Senders: c}
	p := sys.probe()
	// Each side starts right after a checkpoint, at the same point of the checkpoint
	// cycle: neither pays for the other's dirty pages, and a checkpoint of the server's
	// own rarely falls inside either.
	if _, err := p.conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return side, fmt.Errorf("checkpoint: %w", err)
	}
	touch := touchIdle(sys)
	before, err := p.snapshot(ctx, touch)
	if err != nil {
		return side, err
	}

	// Park.
	ph := phasesOf(sys)
	cpuSince := startCPU(ctx, sys.pool(), ph.pids()...)
	start := time.Now()
	ids, err := ph.park(ctx, workflows, c)
	if err != nil {
		return side, fmt.Errorf("%s: start: %w", sys.name(), err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		n, err := sys.countParked(ctx, p, ids)
		if err != nil {
			return side, fmt.Errorf("%s: count parked: %w", sys.name(), err)
		}
		if n == workflows {
			break
		}
		if time.Now().After(deadline) {
			return side, fmt.Errorf("%s: only %d of %d workflows parked", sys.name(), n, workflows)
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return side, err
		}
	}
	side.ParkedPerSecond = float64(workflows) / time.Since(start).Seconds()
	side.ParkCPU = cpuSince(workflows)
	parked, err := p.snapshot(ctx, touch)
	if err != nil {
		return side, err
	}
	side.RowsPerParked, side.TransactionsPerParked = parked.minus(before, workflows)

	// Deliver.
	cpuSince = startCPU(ctx, sys.pool(), ph.pids()...)
	start = time.Now()
	sent, returned, err := ph.deliver(ctx, ids, c)
	if err != nil {
		return side, fmt.Errorf("%s: send: %w", sys.name(), err)
	}
	done, err := sys.completions(ctx, p, ids)
	if err != nil {
		return side, fmt.Errorf("%s: completions: %w", sys.name(), err)
	}
	side.EventCPU = cpuSince(workflows)
	lat := make([]time.Duration, workflows)
	last := start
	for i, t := range done {
		// A completion stamp is its transaction's start; a workflow completed by the
		// send's own transaction has committed only by the time the send returns.
		t = latest(t, returned[i])
		lat[i] = t.Sub(sent[i])
		if t.After(last) {
			last = t
		}
	}
	side.EventsPerSecond = float64(workflows) / last.Sub(start).Seconds()
	side.SendToCompletion = Summarise(lat)
	delivered, err := p.snapshot(ctx, touch)
	if err != nil {
		return side, err
	}
	side.RowsPerEvent, side.TransactionsPerEvent = delivered.minus(parked, workflows)
	return side, nil
}

// phases are a round's two timed steps on one system: start workflows workflows from c
// concurrent starters and return their ids; deliver one event to each of ids from c
// concurrent senders and return when each send started and returned. pids are the
// processes besides this one whose CPU the steps take.
type phases interface {
	park(ctx context.Context, workflows, c int) ([]string, error)
	deliver(ctx context.Context, ids []string, c int) (sent, returned []time.Time, err error)
	pids() []int
}

// callee is a system this process calls for each workflow.
type callee interface {
	// start starts one workflow and returns its id.
	start(ctx context.Context) (string, error)
	// send delivers the event to workflow id.
	send(ctx context.Context, id string) error
}

// phasesOf is sys's own phases when it runs them itself (a system in a process of its
// own), else its start and send fanned out from this process.
func phasesOf(sys peerRunner) phases {
	if p, ok := sys.(phases); ok {
		return p
	}
	return inProcess{sys.(callee)}
}

// inProcess runs a system's phases by calling it from concurrent goroutines here.
type inProcess struct{ sys callee }

func (p inProcess) pids() []int { return nil }

func (p inProcess) park(ctx context.Context, workflows, c int) ([]string, error) {
	ids := make([]string, workflows)
	err := fanOut(c, workflows, func(i int) error {
		id, err := p.sys.start(ctx)
		ids[i] = id
		return err
	})
	return ids, err
}

func (p inProcess) deliver(ctx context.Context, ids []string, c int) (sent, returned []time.Time, err error) {
	sent, returned = make([]time.Time, len(ids)), make([]time.Time, len(ids))
	err = fanOut(c, len(ids), func(i int) error {
		sent[i] = time.Now()
		err := p.sys.send(ctx, ids[i])
		returned[i] = time.Now()
		return err
	})
	return sent, returned, err
}

// idleToucher is a system whose connections are not in its pool(): it touches its idle
// connections itself and says on how many.
type idleToucher interface {
	touchIdle(ctx context.Context) (int, error)
}

// touchIdle is how snapshot reaches sys's idle connections: those of its pool, and
// those it touches itself.
func touchIdle(sys peerRunner) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		n := 0
		for _, c := range sys.pool().AcquireAllIdle(ctx) {
			_, err := c.Exec(ctx, "SELECT 1")
			c.Release()
			if err != nil {
				return n, fmt.Errorf("touch connection: %w", err)
			}
			n++
		}
		if t, ok := sys.(idleToucher); ok {
			m, err := t.touchIdle(ctx)
			n += m
			if err != nil {
				return n, fmt.Errorf("touch connections: %w", err)
			}
		}
		return n, nil
	}
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fanOut runs do(0 … n-1) on c goroutines and returns the first error.
func fanOut(c, n int, do func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// medianSide takes the median of each figure on its own.
func medianSide(sides []PeerSide) PeerSide {
	if len(sides) == 0 {
		return PeerSide{}
	}
	med := func(f func(PeerSide) float64) float64 { return medianOf(sides, f) }
	return PeerSide{
		System: sides[0].System, Senders: sides[0].Senders,
		ParkedPerSecond:       med(func(s PeerSide) float64 { return s.ParkedPerSecond }),
		EventsPerSecond:       med(func(s PeerSide) float64 { return s.EventsPerSecond }),
		SendToCompletion:      medianLatencies(sides, func(s PeerSide) Latencies { return s.SendToCompletion }),
		RowsPerParked:         med(func(s PeerSide) float64 { return s.RowsPerParked }),
		TransactionsPerParked: med(func(s PeerSide) float64 { return s.TransactionsPerParked }),
		RowsPerEvent:          med(func(s PeerSide) float64 { return s.RowsPerEvent }),
		TransactionsPerEvent:  med(func(s PeerSide) float64 { return s.TransactionsPerEvent }),
		ParkCPU:               medianCPU(sides, func(s PeerSide) *CPUUse { return s.ParkCPU }),
		EventCPU:              medianCPU(sides, func(s PeerSide) *CPUUse { return s.EventCPU }),
	}
}

// database is a throwaway database on the bench's server.
type database struct {
	url  string
	drop func()
}

// newDatabase creates a database named prefix and a random suffix on the server at
// serverURL. Each system of the peer comparison gets one, so that pg_stat_database's
// transaction counts are that system's alone (other work on the server runs in other
// databases).
func newDatabase(ctx context.Context, serverURL, prefix string) (*database, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	u.Path = "/" + name
	return &database{url: u.String(), drop: func() {
		c, err := pgx.Connect(context.Background(), serverURL)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	}}, nil
}

// probe is the bench's own connection to a system's database. It counts the
// transactions it runs there, so that they can be taken out of the system's.
type probe struct {
	conn   *pgx.Conn
	schema string
	ran    int
}

func newProbe(ctx context.Context, dbURL, schema string) (*probe, error) {
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	return &probe{conn: c, schema: schema}, nil
}

func (p *probe) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	p.ran++
	return p.conn.QueryRow(ctx, sql, args...)
}

func (p *probe) query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	p.ran++
	return p.conn.Query(ctx, sql, args...)
}

// stats are a database's cumulative counters at one moment.
type stats struct {
	rows, transactions int64
	// ran is how many transactions the probe had run before these were read.
	ran int
}

// minus is the rows and transactions per unit from earlier to s, the probe's own
// transactions and the pool touches taken out.
func (s stats) minus(earlier stats, units int) (rows, transactions float64) {
	own := int64(s.ran - earlier.ran)
	return float64(s.rows-earlier.rows) / float64(units), float64(s.transactions-earlier.transactions-own) / float64(units)
}

// snapshot reads the counters once every backend has reported its own. A PostgreSQL
// backend reports its counters when it goes idle, at most once a second (else only
// after ten idle seconds), so this waits out the second, then runs a statement on each
// of the system's idle connections (touch) and on the probe's, and counts those
// statements as the probe's own. A connection busy at that moment (a peer's poller)
// reports once it goes idle: the counters are read again, a second apart, until they
// stop moving (at most statsSettleReads times).
func (p *probe) snapshot(ctx context.Context, touch func(context.Context) (int, error)) (stats, error) {
	var last stats
	for read := range statsSettleReads {
		s, err := p.read(ctx, touch)
		if err != nil {
			return stats{}, err
		}
		if read > 0 && s.rows == last.rows {
			return s, nil
		}
		last = s
	}
	return last, nil
}

// statsSettleReads bounds the reads of one snapshot.
const statsSettleReads = 4

// read is one reading of the counters for snapshot.
func (p *probe) read(ctx context.Context, touch func(context.Context) (int, error)) (stats, error) {
	if err := sleepCtx(ctx, 1100*time.Millisecond); err != nil {
		return stats{}, err
	}
	touched, err := touch(ctx)
	p.ran += touched
	if err != nil {
		return stats{}, err
	}
	p.ran++
	if _, err := p.conn.Exec(ctx, "SELECT 1"); err != nil {
		return stats{}, err
	}
	s := stats{ran: p.ran}
	err = p.queryRow(ctx, `
SELECT (SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = $1),
       (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database())`,
		p.schema).Scan(&s.rows, &s.transactions)
	if err != nil {
		return stats{}, fmt.Errorf("read statistics: %w", err)
	}
	return s, nil
}

// rendezvousPeer is one replica serving the API, with a workflow of one wait_events
// node that waits for an event sent by type.
type rendezvousPeer struct {
	svc    *server.Service
	p      *probe
	client *http.Client
	base   string
	close  func()
}

const (
	peerWorkflow  = "peer"
	peerEventType = "bench.peer"
)

func startRendezvousPeer(ctx context.Context, dbURL string, conns int, logger *slog.Logger) (*rendezvousPeer, error) {
	schema, err := NewSchema(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	p, err := newProbe(ctx, schema.URL, schema.Name)
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	svc, err := server.New(runCtx, server.Config{
		// The bench measures the event paths on loopback; authentication is not what it measures.
		Auth:        auth.Config{Insecure: true},
		DatabaseURL: schema.URL, HTTPAddr: "127.0.0.1:0", InstanceID: "bench-peer", DBMaxConns: int32(conns), Logger: logger,
	})
	if err != nil {
		stop()
		p.conn.Close(ctx)
		return nil, fmt.Errorf("replica: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = svc.Run(runCtx); close(done) }()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	r := &rendezvousPeer{svc: svc, p: p, client: client, base: "http://" + svc.Addr(),
		close: func() { stop(); <-done; client.CloseIdleConnections(); p.conn.Close(context.Background()) }}
	def := fmt.Sprintf(`{"name":%q,"nodes":[{"id":"wait","type":"wait_events","data":{
		"events":[{"name":"go","source":"send","type":%q}],"aggregationStrategy":"all","timeout":3600}}]}`, peerWorkflow, peerEventType)
	if _, err := svc.Exec.PutWorkflow(ctx, peerWorkflow, []byte(def)); err != nil {
		r.close()
		return nil, fmt.Errorf("store workflow: %w", err)
	}
	return r, nil
}

func (r *rendezvousPeer) name() PeerSystem    { return PeerRendezvous }
func (r *rendezvousPeer) pool() *pgxpool.Pool { return r.svc.Pool() }
func (r *rendezvousPeer) probe() *probe       { return r.p }

func (r *rendezvousPeer) start(ctx context.Context) (string, error) {
	st, err := r.svc.Exec.StartExecution(ctx, peerWorkflow, nil)
	return st.ID.String(), err
}

func (r *rendezvousPeer) send(ctx context.Context, id string) error {
	body, _ := json.Marshal(map[string]any{"type": peerEventType, "payload": map[string]string{"from": "bench"}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+"/api/v1/executions/"+id+"/events", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || !bytes.Contains(answer, []byte(`"delivered"`)) {
		return fmt.Errorf("event answered %d: %s", resp.StatusCode, answer)
	}
	return nil
}

func (r *rendezvousPeer) countParked(ctx context.Context, p *probe, ids []string) (int, error) {
	var n int
	err := p.queryRow(ctx, `SELECT count(*) FROM execution_wait_states WHERE execution_id = ANY($1::uuid[]) AND status = 'waiting'`, ids).Scan(&n)
	return n, err
}

func (r *rendezvousPeer) completions(ctx context.Context, p *probe, ids []string) ([]time.Time, error) {
	return pollCompletions(ctx, p, ids,
		`SELECT count(*) FROM executions WHERE id = ANY($1::uuid[]) AND status = 'completed'`,
		`SELECT id::text, finished_at FROM executions WHERE id = ANY($1::uuid[])`,
		func(rows pgx.Rows) (string, time.Time, error) {
			var id string
			var t time.Time
			err := rows.Scan(&id, &t)
			return id, t, err
		})
}

// pollCompletions waits until count reports every one of ids complete, then reads
// when each completed.
func pollCompletions(ctx context.Context, p *probe, ids []string, count, times string,
	scan func(pgx.Rows) (string, time.Time, error)) ([]time.Time, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var n int
		if err := p.queryRow(ctx, count, ids).Scan(&n); err != nil {
			return nil, err
		}
		if n == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d workflows completed", n, len(ids))
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return nil, err
		}
	}
	rows, err := p.query(ctx, times, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	at := make(map[string]time.Time, len(ids))
	for rows.Next() {
		id, t, err := scan(rows)
		if err != nil {
			return nil, err
		}
		at[id] = t
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]time.Time, len(ids))
	for i, id := range ids {
		t, ok := at[id]
		if !ok {
			return nil, fmt.Errorf("no completion time for %s", id)
		}
		out[i] = t
	}
	return out, nil
}

// dbosPeer is DBOS Transact with one workflow that parks on Recv and completes with
// the message it receives.
type dbosPeer struct {
	ctx   dbos.Context
	own   *pgxpool.Pool
	p     *probe
	close func()
}

const (
	dbosSchema = "dbos"
	dbosTopic  = "bench"
)

// dbosReceive is the DBOS workflow: park on Recv until the event arrives.
func dbosReceive(ctx dbos.Context, _ string) (string, error) {
	return dbos.Recv[string](ctx, dbosTopic, time.Hour)
}

func startDBOSPeer(ctx context.Context, dbURL string, conns int, logger *slog.Logger) (*dbosPeer, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	own, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	dctx, err := dbos.NewContext(ctx, dbos.Config{
		AppName: "rendezvous-bench", SystemDBPool: own, DatabaseSchema: dbosSchema, Logger: logger,
	})
	if err != nil {
		own.Close()
		return nil, fmt.Errorf("context: %w", err)
	}
	dbos.RegisterWorkflow(dctx, dbosReceive)
	if err := dbos.Launch(dctx); err != nil {
		own.Close()
		return nil, fmt.Errorf("launch: %w", err)
	}
	p, err := newProbe(ctx, dbURL, dbosSchema)
	if err != nil {
		dbos.Shutdown(dctx, 10*time.Second)
		own.Close()
		return nil, err
	}
	return &dbosPeer{ctx: dctx, own: own, p: p, close: func() {
		dbos.Shutdown(dctx, 10*time.Second)
		own.Close()
		p.conn.Close(context.Background())
	}}, nil
}

func (d *dbosPeer) name() PeerSystem    { return PeerDBOS }
func (d *dbosPeer) pool() *pgxpool.Pool { return d.own }
func (d *dbosPeer) probe() *probe       { return d.p }

func (d *dbosPeer) start(context.Context) (string, error) {
	id := uuid.NewString()
	_, err := dbos.RunWorkflow(d.ctx, dbosReceive, "", dbos.WithWorkflowID(id))
	return id, err
}

func (d *dbosPeer) send(_ context.Context, id string) error {
	return dbos.Send(d.ctx, id, "bench", dbosTopic)
}

// countParked counts the workflows whose Recv checkpointed its timeout, the last thing
// it writes before waiting.
func (d *dbosPeer) countParked(ctx context.Context, p *probe, ids []string) (int, error) {
	var n int
	err := p.queryRow(ctx, `SELECT count(*) FROM `+dbosSchema+`.operation_outputs
		WHERE workflow_uuid = ANY($1::text[]) AND function_name = 'DBOS.sleep'`, ids).Scan(&n)
	return n, err
}

func (d *dbosPeer) completions(ctx context.Context, p *probe, ids []string) ([]time.Time, error) {
	return pollCompletions(ctx, p, ids,
		`SELECT count(*) FROM `+dbosSchema+`.workflow_status WHERE workflow_uuid = ANY($1::text[]) AND status = 'SUCCESS'`,
		`SELECT workflow_uuid, completed_at FROM `+dbosSchema+`.workflow_status WHERE workflow_uuid = ANY($1::text[])`,
		func(rows pgx.Rows) (string, time.Time, error) {
			var id string
			var ms int64
			err := rows.Scan(&id, &ms)
			return id, time.UnixMilli(ms), err
		})
}
