package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Attempt is one HTTP request of a callback send.
type Attempt struct {
	// Send is 0 for the first of the two identical sends, 1 for the second.
	Send    int       `json:"send"`
	Replica int       `json:"replica"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	// Status is the answer, 0 when none came. Outcome is the outcome a 202 body names;
	// for a sent event, delivered or buffered.
	Status  int    `json:"status,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Err     string `json:"err,omitempty"`
	// Unsure: the request may have reached the replica without an answer coming back
	// (reset, timeout, 5xx), so it may or may not have been applied.
	Unsure bool `json:"unsure,omitempty"`
}

// Produced is one record produced for an event.
type Produced struct {
	Start     time.Time `json:"start"`
	Ack       time.Time `json:"ack"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	// Copy is the re-produced duplicate of the event's record.
	Copy bool   `json:"copy,omitempty"`
	Err  string `json:"err,omitempty"`
}

// EventLog is what the driver did to deliver one event.
type EventLog struct {
	Name string `json:"name"`
	Mode string `json:"mode"`
	// Planned is when the plan wanted it sent (zero for mode none).
	Planned time.Time `json:"planned,omitzero"`
	// Payload is the exact body or record value sent; Key is the idempotency key the
	// service derives from it ("sha256:<hex>").
	Payload  json.RawMessage `json:"payload,omitempty"`
	Key      string          `json:"key,omitempty"`
	Attempts []Attempt       `json:"attempts,omitempty"`
	Records  []Produced      `json:"records,omitempty"`
	// Noise records failed the filter on purpose; they must change nothing.
	Noise []Produced `json:"noise,omitempty"`
	// NoCall: the wait's correlated call never reached the fake service, so the
	// external service never answered.
	NoCall bool `json:"no_call,omitempty"`
}

// WaitInfo is a registered wait as discovered in the database.
type WaitInfo struct {
	CorrelationID uuid.UUID            `json:"correlation_id"`
	Created       time.Time            `json:"created"`
	Expires       time.Time            `json:"expires"`
	Deadlines     map[string]time.Time `json:"deadlines"`
}

// ExecLog is what happened to one planned execution on the driver's side.
type ExecLog struct {
	Index     int        `json:"index"`
	ID        uuid.UUID  `json:"id"`
	StartErr  string     `json:"start_err,omitempty"`
	Wait      *WaitInfo  `json:"wait,omitempty"`
	FirstCall time.Time  `json:"first_call,omitzero"`
	Events    []EventLog `json:"events"`
	Cross     *EventLog  `json:"cross,omitempty"`
	// Redrive is the operator's redrive, for an execution planned with one.
	Redrive *RedriveLog `json:"redrive,omitempty"`
}

// termGrace is how long a replica may take to exit after SIGTERM before it is killed:
// the Kubernetes manifests' terminationGracePeriodSeconds.
const termGrace = 75 * time.Second

// FaultLog is one fault as it happened.
type FaultLog struct {
	Fault
	// Sender names the replica process it stopped.
	Sender string    `json:"sender,omitempty"`
	Start  time.Time `json:"start"`
	// Stopped is how long the replica took to exit; Shutdown, after a SIGTERM, what
	// held its shutdown as it logged it: the slowest stage, or the last one done before
	// it was killed (slowestShutdownStage).
	Stopped  time.Duration `json:"stopped_ns,omitempty"`
	Shutdown string        `json:"shutdown,omitempty"`
	// End is when the replica was ready again, or the database back.
	End time.Time `json:"end"`
	Err string    `json:"err,omitempty"`
}

// Interval is a stretch of time during which Kafka delivery to some partitions is not
// bounded by Config.KafkaLatency.
type Interval struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Partitions are the partitions of Topic disturbed, Sent those of SentTopic; nil
	// Partitions means every partition of both.
	Partitions []int32 `json:"partitions,omitempty"`
	Sent       []int32 `json:"sent_partitions,omitempty"`
	Reason     string  `json:"reason"`
}

// Lifetime is when one replica process ran; a zero End means it ran to the end.
type Lifetime struct {
	Sender string    `json:"sender"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end,omitzero"`
	Killed bool      `json:"killed,omitempty"`
}

// settle is how long consumers take to resume after the group became Stable again, or
// after a database outage (they pause failing partitions with a backoff of up to 10 s).
const settle = 3 * time.Second

// detectDown is how long callers keep sending to a replica after it went down.
const detectDown = 500 * time.Millisecond

// execRun is an execution while the run goes on.
type execRun struct {
	plan *ExecPlan
	def  *Definition

	mu         sync.Mutex
	log        ExecLog
	discovered chan struct{}
	called     chan struct{}
}

type runner struct {
	cfg  Config
	plan Plan
	cl   *cluster
	fk   *fake
	pool *pgxpool.Pool
	prod *kgo.Client
	http *http.Client
	ctx  context.Context
	// operatorToken is the secret of OperatorToken, which the redrives carry.
	operatorToken string

	t0    time.Time
	execs []*execRun
	byID  sync.Map // uuid.UUID -> *execRun
	work  sync.WaitGroup

	mu        sync.Mutex
	faults    []FaultLog
	dead      []DeadMember
	lifetimes []Lifetime
	down      []bool
	notes     []string
	group     []GroupSample
	lastGroup GroupSample
	evicted   []Eviction
	triggers  []TriggerLog

	started, discovered, delivered atomic.Int64
}

func (r *runner) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.notes = append(r.notes, msg)
	r.mu.Unlock()
	fmt.Fprintf(r.cfg.Out, "chaos: %s\n", msg)
}

// at runs fn at t in its own goroutine, counted in r.work.
func (r *runner) at(t time.Time, fn func()) {
	r.work.Add(1)
	time.AfterFunc(time.Until(t), func() {
		defer r.work.Done()
		if r.ctx.Err() != nil {
			return
		}
		fn()
	})
}

// sleep waits d or until the run is cancelled.
func (r *runner) sleep(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-r.ctx.Done():
		return false
	}
}

// drive plays the plan: starts, deliveries (scheduled as waits are discovered) and
// faults. It returns when everything scheduled has been done.
func (r *runner) drive() {
	r.t0 = time.Now()
	for i := range r.plan.Executions {
		e := r.execs[i]
		r.at(r.t0.Add(e.plan.StartAt), func() { r.start(e) })
	}
	for _, f := range r.plan.Faults {
		r.at(r.t0.Add(f.At), func() { r.fault(f) })
	}
	r.driveTriggers()
	stop := make(chan struct{})
	var discovery sync.WaitGroup
	discovery.Add(2)
	go func() { defer discovery.Done(); r.discover(stop) }()
	go func() { defer discovery.Done(); r.progress(stop) }()
	// Deliveries join r.work when their wait is discovered, possibly after every start
	// has finished: only once discovery is over may r.work be waited for.
	r.awaitDiscovery()
	close(stop)
	discovery.Wait()
	r.work.Wait()
}

func (r *runner) progress(stop <-chan struct{}) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-r.ctx.Done():
			return
		case <-t.C:
			fmt.Fprintf(r.cfg.Out, "chaos: %5.0fs  started %d/%d, waits discovered %d, events sent %d\n",
				time.Since(r.t0).Seconds(), r.started.Load(), len(r.execs), r.discovered.Load(), r.delivered.Load())
		}
	}
}

// awaitDiscovery returns once every execution is discovered or failed to start, the
// run is cancelled, or two minutes after the last start (a wait that never registers is
// reported by the checks).
func (r *runner) awaitDiscovery() {
	timeout := time.After(time.Until(r.t0.Add(r.plan.Spread + 2*time.Minute)))
	for _, e := range r.execs {
		select {
		case <-e.discovered:
		case <-r.ctx.Done():
			return
		case <-timeout:
			return
		}
	}
}

// liveReplica returns the first replica, from i on, that the driver believes is up.
func (r *runner) liveReplica(i int) int {
	n := len(r.cl.replicas)
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range n {
		j := (i + k) % n
		if !r.down[j] {
			return j
		}
	}
	return i % n
}

func (r *runner) setDown(i int, down bool) {
	r.mu.Lock()
	r.down[i] = down
	r.mu.Unlock()
}

// start creates the execution through a replica's API. A request whose answer was lost
// may have created it: the database is asked before trying again, by the plan index
// stored in the input.
func (r *runner) start(e *execRun) {
	body, _ := json.Marshal(map[string]any{"input": map[string]any{"chaos_plan": e.plan.Index, "chaos_match": MatchValue(e.plan.Index),
		"seed": strconv.FormatUint(r.plan.Seed, 10)}})
	for attempt := 0; r.ctx.Err() == nil; attempt++ {
		rep := r.liveReplica(e.plan.Replica + attempt)
		url := "http://" + r.cl.replicas[rep].addr + "/api/v1/workflows/" + e.def.Name + "/executions"
		req, _ := http.NewRequestWithContext(r.ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := r.http.Do(req)
		if err == nil {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				var started struct {
					ID uuid.UUID `json:"id"`
				}
				if err := json.Unmarshal(raw, &started); err == nil && started.ID != uuid.Nil {
					r.markStarted(e, started.ID)
					return
				}
			}
			if resp.StatusCode < 500 {
				r.failStart(e, fmt.Sprintf("start answered %d: %s", resp.StatusCode, raw))
				return
			}
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			if id, ok := r.startedInDB(e); ok {
				r.markStarted(e, id)
				return
			}
		}
		if !r.sleep(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)) {
			break
		}
	}
	r.failStart(e, "run cancelled before the execution started")
}

func (r *runner) startedInDB(e *execRun) (uuid.UUID, bool) {
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	var id uuid.UUID
	err := r.pool.QueryRow(ctx, `SELECT id FROM executions WHERE workflow_name = $1 AND input->>'chaos_plan' = $2 ORDER BY created_at LIMIT 1`,
		e.def.Name, strconv.Itoa(e.plan.Index)).Scan(&id)
	return id, err == nil
}

func (r *runner) markStarted(e *execRun, id uuid.UUID) {
	e.mu.Lock()
	e.log.ID = id
	e.mu.Unlock()
	r.byID.Store(id, e)
	r.started.Add(1)
	// Early records race the wait the execution is about to register: produced now,
	// they are in most cases applied before it exists. Their correlation id is unknown
	// yet (nil in the payload).
	for i, ep := range e.plan.Events {
		if ep.Mode == ModeEarly {
			e.mu.Lock()
			e.log.Events[i].Planned = time.Now()
			e.mu.Unlock()
			r.record(e, i, WaitInfo{})
		}
	}
}

func (r *runner) failStart(e *execRun, reason string) {
	e.mu.Lock()
	e.log.StartErr = reason
	e.mu.Unlock()
	close(e.discovered)
}

// discover polls the database for the waits of started executions and schedules their
// deliveries. It reads the deadlines the service fixed at registration, so events are
// placed exactly relative to them.
func (r *runner) discover(stop <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		var pending []uuid.UUID
		r.byID.Range(func(k, v any) bool {
			e := v.(*execRun)
			e.mu.Lock()
			if e.log.Wait == nil {
				pending = append(pending, k.(uuid.UUID))
			}
			e.mu.Unlock()
			return true
		})
		if len(pending) == 0 {
			continue
		}
		if err := r.discoverWaits(pending); err != nil && r.ctx.Err() == nil {
			// The server may be restarting (pg-restart ctl): look again next tick.
			continue
		}
	}
}

type expectedEvent struct {
	Name       string     `json:"name"`
	DeadlineAt *time.Time `json:"deadline_at"`
}

func (r *runner) discoverWaits(ids []uuid.UUID) error {
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	rows, err := r.pool.Query(ctx, `SELECT execution_id, correlation_id, created_at, expires_at, expected_events
		FROM execution_wait_states WHERE execution_id = ANY($1) AND node_id = 'wait'`, ids)
	if err != nil {
		return err
	}
	type found struct {
		exec uuid.UUID
		info WaitInfo
	}
	var all []found
	for rows.Next() {
		var f found
		var expected []byte
		if err := rows.Scan(&f.exec, &f.info.CorrelationID, &f.info.Created, &f.info.Expires, &expected); err != nil {
			rows.Close()
			return err
		}
		var ev []expectedEvent
		if err := json.Unmarshal(expected, &ev); err != nil {
			rows.Close()
			return fmt.Errorf("decode expected_events: %w", err)
		}
		f.info.Deadlines = map[string]time.Time{}
		for _, x := range ev {
			f.info.Deadlines[x.Name] = f.info.Expires
			if x.DeadlineAt != nil {
				f.info.Deadlines[x.Name] = *x.DeadlineAt
			}
		}
		all = append(all, f)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, f := range all {
		v, ok := r.byID.Load(f.exec)
		if !ok {
			continue
		}
		e := v.(*execRun)
		e.mu.Lock()
		if e.log.Wait != nil {
			e.mu.Unlock()
			continue
		}
		info := f.info
		e.log.Wait = &info
		e.mu.Unlock()
		r.discovered.Add(1)
		r.schedule(e, info)
		close(e.discovered)
	}
	return nil
}

// schedule places the execution's deliveries relative to its wait's deadlines.
func (r *runner) schedule(e *execRun, w WaitInfo) {
	for i, ep := range e.plan.Events {
		deadline := w.Deadlines[ep.Name]
		var at time.Time
		switch ep.Mode {
		case ModeNone, ModeEarly:
			continue // early: produced when the execution started
		case ModeOnTime:
			at = w.Created.Add(time.Duration(ep.Frac * float64(deadline.Sub(w.Created))))
		default:
			at = deadline.Add(ep.Offset)
		}
		e.mu.Lock()
		e.log.Events[i].Planned = at
		e.mu.Unlock()
		switch ep.Name {
		case EventAPI:
			r.at(at, func() { r.callback(e, i, w) })
		case EventSend:
			r.at(at, func() { r.sendEvent(e, i, w) })
		case EventKafka, EventMatch:
			r.at(at, func() { r.record(e, i, w) })
		}
	}
	if c := e.plan.Cross; c != nil {
		at := w.Created.Add(time.Duration(c.Frac * float64(w.Expires.Sub(w.Created))))
		r.at(at, func() { r.cross(e, w) })
	}
	if rd := e.plan.Redrive; rd != nil {
		r.at(w.Expires.Add(rd.After), func() { r.redrive(e) })
	}
}

// chaosBlock is carried by every payload, whatever the id layout: which execution and
// wait the driver meant it for. The checks compare it with the wait it landed on.
func chaosBlock(e *execRun, corr uuid.UUID, name string) map[string]any {
	return map[string]any{"execution_id": e.log.ID.String(), "correlation_id": corr.String(), "event": name, "plan": e.plan.Index}
}

// Key is the idempotency key the service derives from an unsigned payload.
func Key(payload []byte) string {
	sum := sha256.Sum256(payload)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// callback answers the wait's correlated call: the same body twice, to the planned
// replicas (the next live one when a replica is down), each retried until the service
// gives a definite answer.
func (r *runner) callback(e *execRun, i int, w WaitInfo) {
	ep := e.plan.Events[i]
	// The external service can only answer a call it received.
	select {
	case <-e.called:
	case <-time.After(time.Until(w.Expires.Add(10 * time.Second))):
		e.mu.Lock()
		e.log.Events[i].NoCall = true
		e.mu.Unlock()
		return
	case <-r.ctx.Done():
		return
	}
	e.mu.Lock()
	body := map[string]any{"decision": "approved", "chaos": chaosBlock(e, w.CorrelationID, EventAPI)}
	if !ep.IDsInHeaders {
		body["execution_id"] = e.log.ID.String()
		body["correlation_id"] = w.CorrelationID.String()
	}
	payload, _ := json.Marshal(body)
	e.log.Events[i].Payload, e.log.Events[i].Key = payload, Key(payload)
	execID := e.log.ID
	e.mu.Unlock()
	headers := http.Header{"Content-Type": {"application/json"}}
	if ep.IDsInHeaders {
		headers.Set("X-Execution-Id", execID.String())
		headers.Set("X-Correlation-Id", w.CorrelationID.String())
	}
	r.sendTwice(e, i, "/api/internal/callbacks/chaos", payload, headers)
}

// sendEvent sends the wait's event by type, with an id: through the API, the same body
// twice, to the planned replicas, each retried until the service gives a definite
// answer; or, AsRecord, as two records of SentTopic. The id makes the second a duplicate
// (200) whatever the first did; one sent after its wait ended is buffered (202
// buffered), or refused (409) once the execution has finished.
func (r *runner) sendEvent(e *execRun, i int, w WaitInfo) {
	ep := e.plan.Events[i]
	e.mu.Lock()
	id := fmt.Sprintf("chaos-%s-%s", e.log.ID, EventSend)
	event := map[string]any{"type": SendType, "id": id,
		"payload": map[string]any{"decision": "approved", "chaos": chaosBlock(e, w.CorrelationID, EventSend)}}
	execID := e.log.ID
	if ep.AsRecord {
		event["execution_id"] = execID.String()
	}
	payload, _ := json.Marshal(event)
	e.log.Events[i].Payload, e.log.Events[i].Key = payload, "id:"+id
	e.mu.Unlock()
	if !ep.AsRecord {
		r.sendTwice(e, i, "/api/v1/executions/"+execID.String()+"/events", payload, http.Header{"Content-Type": {"application/json"}})
		return
	}
	for s := range 2 {
		if s == 1 && !r.sleep(ep.SecondAfter) {
			break
		}
		p := r.produce(SentTopic, execID, payload, nil, s == 1)
		e.mu.Lock()
		e.log.Events[i].Records = append(e.log.Events[i].Records, p)
		e.mu.Unlock()
	}
	r.delivered.Add(1)
}

// sendTwice posts event i's body to path twice, the second SecondAfter the first, and
// logs every attempt.
func (r *runner) sendTwice(e *execRun, i int, path string, payload []byte, headers http.Header) {
	ep := e.plan.Events[i]
	var sends sync.WaitGroup
	for s := range 2 {
		sends.Add(1)
		go func() {
			defer sends.Done()
			if s == 1 && !r.sleep(ep.SecondAfter) {
				return
			}
			attempts := r.post(s, ep.Replicas[s], path, payload, headers)
			e.mu.Lock()
			e.log.Events[i].Attempts = append(e.log.Events[i].Attempts, attempts...)
			e.mu.Unlock()
		}()
	}
	sends.Wait()
	r.delivered.Add(1)
}

// post sends one body to path until a definite answer (anything but a network error or
// a 5xx), moving to the next live replica after each failure; a 202's outcome is the
// answer's.
func (r *runner) post(s, replica int, path string, payload []byte, headers http.Header) []Attempt {
	return r.postUntilDefinite(s, replica, path, payload, headers, func(a *Attempt, body []byte) {
		var answer struct {
			Outcome string `json:"outcome"`
		}
		if a.Status == http.StatusAccepted && json.Unmarshal(body, &answer) == nil {
			a.Outcome = answer.Outcome
		}
	})
}

// postUntilDefinite sends one body to path until a definite answer, moving to the next
// live replica after each network error or 5xx; read fills an answered attempt's
// outcome from its body. An attempt is unsure when its request may have reached the
// replica without an answer coming back.
func (r *runner) postUntilDefinite(s, replica int, path string, payload []byte, headers http.Header, read func(a *Attempt, body []byte)) []Attempt {
	var out []Attempt
	for attempt := 0; r.ctx.Err() == nil; attempt++ {
		rep := r.liveReplica(replica + attempt)
		req, _ := http.NewRequestWithContext(r.ctx, http.MethodPost, "http://"+r.cl.replicas[rep].addr+path, bytes.NewReader(payload))
		req.Header = headers.Clone()
		a := Attempt{Send: s, Replica: rep, Start: time.Now()}
		resp, err := r.http.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			a.Status = resp.StatusCode
			read(&a, body)
		}
		a.End = time.Now()
		switch {
		case err != nil:
			a.Err = err.Error()
			// Refused: nothing reached the replica.
			a.Unsure = !errors.Is(err, syscall.ECONNREFUSED)
		case a.Status >= 500:
			a.Unsure = true
		}
		out = append(out, a)
		if err == nil && a.Status < 500 {
			return out
		}
		if !r.sleep(min(time.Duration(attempt+1)*100*time.Millisecond, time.Second)) {
			break
		}
	}
	return out
}

// record produces the wait's Kafka record (after a filter-failing noise record when
// planned), and a second copy of it when planned.
func (r *runner) record(e *execRun, i int, w WaitInfo) {
	ep := e.plan.Events[i]
	e.mu.Lock()
	block := chaosBlock(e, w.CorrelationID, ep.Name)
	execID := e.log.ID
	e.mu.Unlock()
	value, headers := kafkaValue(e.def.KafkaIDs, execID, w.CorrelationID, "chaos.done", block)
	if ep.Name == EventMatch {
		// Correlated by the value alone: no ids in the value or the headers.
		block["match"] = MatchValue(e.plan.Index)
		value, _ = json.Marshal(map[string]any{"type": "chaos.done", "chaos": block})
		headers = nil
	}
	if ep.Noise {
		nv, nh := kafkaValue(e.def.KafkaIDs, execID, w.CorrelationID, "chaos.progress", block)
		p := r.produce(Topic, execID, nv, nh, false)
		e.mu.Lock()
		e.log.Events[i].Noise = append(e.log.Events[i].Noise, p)
		e.mu.Unlock()
	}
	e.mu.Lock()
	e.log.Events[i].Payload, e.log.Events[i].Key = value, Key(value)
	e.mu.Unlock()
	p := r.produce(Topic, execID, value, headers, false)
	e.mu.Lock()
	e.log.Events[i].Records = append(e.log.Events[i].Records, p)
	e.mu.Unlock()
	if ep.Reproduce && r.sleep(ep.ReproduceAfter) {
		p := r.produce(Topic, execID, value, headers, true)
		e.mu.Lock()
		e.log.Events[i].Records = append(e.log.Events[i].Records, p)
		e.mu.Unlock()
	}
	r.delivered.Add(1)
}

// kafkaValue builds a record value (and headers) in a definition's id layout.
func kafkaValue(layout string, execID, corrID uuid.UUID, typ string, block map[string]any) ([]byte, []kgo.RecordHeader) {
	v := map[string]any{"type": typ, "chaos": block}
	var headers []kgo.RecordHeader
	switch layout {
	case IDsNested:
		v["data"] = map[string]any{"ids": map[string]any{"execution": execID.String(), "correlation": corrID.String()}}
	case IDsHeaders:
		headers = []kgo.RecordHeader{{Key: "execution_id", Value: []byte(execID.String())}, {Key: "correlation_id", Value: []byte(corrID.String())}}
	default:
		v["execution_id"], v["correlation_id"] = execID.String(), corrID.String()
	}
	raw, _ := json.Marshal(v)
	return raw, headers
}

// produce sends one record to topic synchronously, retrying until the broker
// acknowledges it.
func (r *runner) produce(topic string, key uuid.UUID, value []byte, headers []kgo.RecordHeader, isCopy bool) Produced {
	p := Produced{Topic: topic, Copy: isCopy, Start: time.Now()}
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		rec := &kgo.Record{Topic: topic, Key: []byte(key.String()), Value: value, Headers: headers}
		err := r.prod.ProduceSync(ctx, rec).FirstErr()
		cancel()
		if err == nil {
			p.Ack, p.Partition, p.Offset, p.Err = time.Now(), rec.Partition, rec.Offset, ""
			return p
		}
		p.Err = err.Error()
		if !r.sleep(200 * time.Millisecond) {
			return p
		}
	}
}

// cross sends an event with this execution's id and another execution's correlation id.
func (r *runner) cross(e *execRun, w WaitInfo) {
	c := e.plan.Cross
	partner := r.execs[c.Partner]
	select {
	case <-partner.discovered:
	case <-time.After(60 * time.Second):
	case <-r.ctx.Done():
		return
	}
	partner.mu.Lock()
	pw := partner.log.Wait
	partner.mu.Unlock()
	if pw == nil {
		r.note("execution %d: cross event skipped, partner %d has no wait", e.plan.Index, c.Partner)
		return
	}
	e.mu.Lock()
	block := chaosBlock(e, pw.CorrelationID, c.Name)
	block["crossed"] = true
	execID := e.log.ID
	e.mu.Unlock()
	lg := &EventLog{Name: c.Name, Mode: "cross", Planned: time.Now()}
	if c.Name == EventAPI {
		body := map[string]any{"execution_id": execID.String(), "correlation_id": pw.CorrelationID.String(), "chaos": block}
		lg.Payload, _ = json.Marshal(body)
		lg.Attempts = r.post(0, c.Replica, "/api/internal/callbacks/chaos", lg.Payload, http.Header{"Content-Type": {"application/json"}})
	} else {
		value, headers := kafkaValue(IDsFields, execID, pw.CorrelationID, "chaos.done", block)
		lg.Payload = value
		lg.Records = append(lg.Records, r.produce(Topic, execID, value, headers, false))
	}
	lg.Key = Key(lg.Payload)
	e.mu.Lock()
	e.log.Cross = lg
	e.mu.Unlock()
}

// fault carries out one planned fault and records when it happened and ended.
func (r *runner) fault(f Fault) {
	lg := FaultLog{Fault: f, Start: time.Now()}
	defer func() {
		r.mu.Lock()
		r.faults = append(r.faults, lg)
		r.mu.Unlock()
	}()
	switch f.Kind {
	case FaultKill, FaultTerm:
		rep := r.cl.replicas[f.Replica]
		rep.faults.Lock()
		defer rep.faults.Unlock()
		if time.Since(lg.Start) > time.Second {
			r.note("%s of replica %d waited %.1fs for the fault before it", f.Kind, f.Replica, time.Since(lg.Start).Seconds())
			lg.Start = time.Now()
		}
		rep.mu.Lock()
		p, sender, incarnation := rep.proc, rep.sender(), rep.incarnation
		rep.mu.Unlock()
		lg.Sender = sender
		if p.exited() {
			lg.Err = "replica was already down"
			r.note("%s of replica %d skipped: it is down", f.Kind, f.Replica)
			return
		}
		// The replica's group members now: once it is gone, their partitions wait for the
		// group to evict them (a SIGKILLed member, or one that could not leave in time).
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		before, err := r.cl.sampleGroup(ctx)
		cancel()
		members := before.membersOf(instanceID(f.Replica))
		// Callers learn that a replica is gone the way a load balancer does, a moment
		// after it went: requests in that moment fail and are retried elsewhere.
		time.AfterFunc(detectDown, func() {
			rep.mu.Lock()
			defer rep.mu.Unlock()
			if rep.incarnation == incarnation { // not restarted meanwhile
				r.setDown(f.Replica, true)
			}
		})
		if f.Kind == FaultKill {
			p.kill()
		} else if err := p.stop(termGrace); err != nil {
			lg.Err = err.Error()
		}
		stopped := time.Now()
		lg.Stopped = stopped.Sub(lg.Start)
		if f.Kind == FaultTerm {
			// What held the exit, in the replica's own words.
			lg.Shutdown, _ = slowestShutdownStage(r.cl.replicaLog(f.Replica))
		}
		r.endLifetime(sender, stopped, f.Kind == FaultKill)
		r.mu.Lock()
		for _, id := range members {
			r.dead = append(r.dead, DeadMember{MemberID: id, At: stopped})
		}
		r.mu.Unlock()
		owning := "no group member"
		if err != nil {
			owning = "unknown group membership (" + err.Error() + ")"
		}
		for _, m := range before.Members {
			if m.ClientID == instanceID(f.Replica) {
				owning = fmt.Sprintf("partitions %v of %s and %v of %s in a %s group", m.Partitions, Topic, m.Sent, SentTopic, before.State)
			}
		}
		r.note("%s replica %d (%s) at %.1fs, owning %s; down for %s", f.Kind, f.Replica, sender,
			lg.Start.Sub(r.t0).Seconds(), owning, f.Down.Round(time.Millisecond))
		r.sleep(f.Down)
		if err := r.restart(rep); err != nil {
			lg.Err = err.Error()
		}
		lg.End = time.Now()
	case FaultDatabase:
		if r.cfg.PGRestart == PGRestartCtl {
			r.note("restarting PostgreSQL (pg_ctlcluster) at %.1fs", lg.Start.Sub(r.t0).Seconds())
			if err := r.cl.restartPostgres(r.ctx); err != nil {
				lg.Err = err.Error()
			}
		} else {
			r.note("cutting the database proxy at %.1fs for %s", lg.Start.Sub(r.t0).Seconds(), f.Down.Round(time.Millisecond))
			r.cl.proxy.Cut()
			r.sleep(f.Down)
			r.cl.proxy.Restore()
		}
		lg.End = time.Now()
	}
}

// restart starts the replica again and waits until it serves. A replica that cannot
// reach the database at start exits (by design); like an orchestrator, the driver starts
// it again with a backoff.
func (r *runner) restart(rep *replica) error {
	deadline := time.Now().Add(2 * time.Minute)
	backoff := time.Second
	for {
		if err := r.cl.startReplica(rep); err != nil {
			return err
		}
		// Callers try it as soon as the process runs; until it listens they are refused
		// and go elsewhere.
		r.setDown(rep.index, false)
		rep.mu.Lock()
		sender, p := rep.sender(), rep.proc
		rep.mu.Unlock()
		r.mu.Lock()
		r.lifetimes = append(r.lifetimes, Lifetime{Sender: sender, Start: time.Now()})
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.ctx, 90*time.Second)
		err := r.cl.waitReady(ctx, rep, 90*time.Second)
		cancel()
		if err == nil || !p.exited() {
			return err
		}
		r.endLifetime(sender, time.Now(), false)
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %d kept exiting at start: %w", rep.index, err)
		}
		r.note("replica %d (%s) exited at start (%v); starting it again in %s", rep.index, sender, p.err, backoff)
		if !r.sleep(backoff) {
			return err
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (r *runner) endLifetime(sender string, at time.Time, killed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.lifetimes {
		if r.lifetimes[i].Sender == sender {
			r.lifetimes[i].End, r.lifetimes[i].Killed = at, killed
		}
	}
}

// onCall tells an execution that its wait's correlated call arrived. It finds the
// execution by the plan index the call names: the call may arrive before the driver
// read the execution's id from the start request's answer.
func (r *runner) onCall(c Call) {
	if c.Plan < 0 || c.Plan >= len(r.execs) {
		return
	}
	e := r.execs[c.Plan]
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.log.FirstCall.IsZero() {
		e.log.FirstCall = c.At
		close(e.called)
	}
}

// failFirst says whether the fake answers the first call of plan index plan's execution
// with 503.
func (r *runner) failFirst(plan int) bool {
	return plan >= 0 && plan < len(r.plan.Executions) && r.plan.Executions[plan].FailFirstCall
}

// quiesce waits, after everything was sent, until every execution has finished, the
// queues are empty, the consumer group has committed every record and no continuation
// call arrived for a while.
func (r *runner) quiesce() error {
	deadline := time.Now().Add(r.cfg.Quiesce)
	lastCount, stableSince := -1, time.Now()
	var last string
	for {
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		var open, queued, outbox int
		err := r.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM executions WHERE status NOT IN ('completed', 'failed', 'cancelled')),
			(SELECT count(*) FROM run_queue), (SELECT count(*) FROM outbox)`).Scan(&open, &queued, &outbox)
		var lagTotal int64
		if err == nil {
			var lag map[string]int64
			lag, err = r.cl.lag(ctx)
			for _, l := range lag {
				lagTotal += l
			}
		}
		cancel()
		n := r.fk.continuationCount()
		if n != lastCount {
			lastCount, stableSince = n, time.Now()
		}
		if err == nil {
			last = fmt.Sprintf("%d executions unfinished, %d queued, %d calls unsent, Kafka lag %d", open, queued, outbox, lagTotal)
			if open == 0 && queued == 0 && outbox == 0 && lagTotal == 0 && time.Since(stableSince) >= 2*time.Second {
				return nil
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not quiet after %s: %s", r.cfg.Quiesce, last)
		}
		if !r.sleep(500 * time.Millisecond) {
			return fmt.Errorf("cancelled while waiting to quiesce: %s", last)
		}
	}
}
