package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The peers this process calls per workflow, and the one that runs its phases itself.
var (
	_ callee      = (*rendezvousPeer)(nil)
	_ callee      = (*dbosPeer)(nil)
	_ phases      = (*temporalPeer)(nil)
	_ idleToucher = (*temporalPeer)(nil)
)

// TemporalDirDefault is where the Temporal runner's module lies, from the repository's
// root (where make bench runs the bench).
const TemporalDirDefault = "harness/bench/temporal"

// temporalPeer is Temporal — its server (frontend, history and matching), a worker of
// its Go SDK and the starters and senders — in a process of its own: the runner of the
// module in harness/bench/temporal, which keeps Temporal out of the product's go.mod.
// The bench builds it with the go command, runs it, and asks it for each phase over its
// standard input and output (JSON lines; the runner's package comment has them).
type temporalPeer struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *tail
	// exited is closed once the process has exited.
	exited chan struct{}
	// own is the bench's small pool on Temporal's database, which reads the server's
	// CPU and log position; Temporal's own connections are the runner's.
	own     *pgxpool.Pool
	p       *probe
	workDir string
}

// temporalStartTimeout bounds the build (minutes on a cold build cache) and the
// server's start; temporalCallTimeout one phase.
const (
	temporalStartTimeout = 15 * time.Minute
	temporalCallTimeout  = 10 * time.Minute
)

// startTemporalPeer builds the runner of the module in dir into a temporary directory
// and starts it on the empty database at dbURL. conns is the other systems' pool size:
// each of Temporal's three services gets a pool of half of it on its main store and an
// eighth on its visibility store, so that history, which does most of the work, has
// about as many connections as another system.
func startTemporalPeer(ctx context.Context, dir, dbURL string, conns int) (*temporalPeer, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(abs, "go.mod")); err != nil {
		return nil, fmt.Errorf("the Temporal runner's module: %w (the bench runs from the repository's root)", err)
	}
	work, err := os.MkdirTemp("", "rdv-bench-temporal-")
	if err != nil {
		return nil, err
	}
	t := &temporalPeer{workDir: work, stderr: &tail{max: 16 << 10}, exited: make(chan struct{})}
	bin := filepath.Join(work, "temporal-peer")
	buildCtx, cancel := context.WithTimeout(ctx, temporalStartTimeout)
	defer cancel()
	build := exec.CommandContext(buildCtx, "go", "build", "-buildvcs=false", "-o", bin, ".")
	build.Dir = abs
	if out, err := build.CombinedOutput(); err != nil {
		t.close()
		return nil, fmt.Errorf("build %s: %w\n%s", abs, err, out)
	}

	t.cmd = exec.Command(bin, "--database-url", dbURL, "--conns", fmt.Sprint(max(conns/2, 2)), "--visibility-conns", fmt.Sprint(max(conns/8, 2)))
	t.cmd.Stderr = t.stderr
	t.cmd.SysProcAttr = childProcAttr()
	if t.in, err = t.cmd.StdinPipe(); err != nil {
		t.close()
		return nil, err
	}
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		t.close()
		return nil, err
	}
	t.out = bufio.NewReaderSize(stdout, 1<<20)
	if err := t.cmd.Start(); err != nil {
		t.close()
		return nil, fmt.Errorf("start runner: %w", err)
	}
	go func() { _ = t.cmd.Wait(); close(t.exited) }()
	var ready struct {
		Ready bool `json:"ready"`
	}
	if err := t.answer(temporalStartTimeout, &ready); err != nil || !ready.Ready {
		t.close()
		return nil, fmt.Errorf("runner did not start: %w", cmpErr(err, errors.New("no ready line")))
	}

	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.close()
		return nil, err
	}
	cfg.MaxConns = 2
	if t.own, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.close()
		return nil, err
	}
	// Temporal's tables are in the database's public schema.
	if t.p, err = newProbe(ctx, dbURL, "public"); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// close stops the runner (closing its input stops its worker and server) and removes
// what was built.
func (t *temporalPeer) close() {
	if t.p != nil {
		t.p.conn.Close(context.Background())
	}
	if t.own != nil {
		t.own.Close()
	}
	if t.in != nil {
		_ = t.in.Close()
	}
	if t.cmd != nil && t.cmd.Process != nil {
		select {
		case <-t.exited:
		case <-time.After(30 * time.Second):
			_ = t.cmd.Process.Kill()
			<-t.exited
		}
	}
	_ = os.RemoveAll(t.workDir)
}

// call sends one command and decodes its answer.
func (t *temporalPeer) call(cmd, answer any) error {
	line, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	if _, err := t.in.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("runner: %w%s", err, t.stderr.say())
	}
	return t.answer(temporalCallTimeout, answer)
}

// answer reads the runner's next line into v, or fails when the runner answers an
// error, exits, or says nothing within wait (then it is killed).
func (t *temporalPeer) answer(wait time.Duration, v any) error {
	type result struct {
		line []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		line, err := t.out.ReadBytes('\n')
		got <- result{line, err}
	}()
	var r result
	select {
	case r = <-got:
	case <-time.After(wait):
		_ = t.cmd.Process.Kill()
		return fmt.Errorf("runner answered nothing in %s%s", wait, t.stderr.say())
	}
	if r.err != nil {
		<-t.exited
		return fmt.Errorf("runner: %w%s", r.err, t.stderr.say())
	}
	var failed struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(r.line, &failed); err != nil {
		return fmt.Errorf("runner said %q: %w", r.line, err)
	}
	if failed.Error != "" {
		return fmt.Errorf("runner: %s", failed.Error)
	}
	return json.Unmarshal(r.line, v)
}

func (t *temporalPeer) name() PeerSystem    { return PeerTemporal }
func (t *temporalPeer) pool() *pgxpool.Pool { return t.own }
func (t *temporalPeer) probe() *probe       { return t.p }
func (t *temporalPeer) pids() []int         { return []int{t.cmd.Process.Pid} }

func (t *temporalPeer) park(_ context.Context, workflows, c int) ([]string, error) {
	var a struct {
		IDs []string `json:"ids"`
	}
	if err := t.call(map[string]any{"op": "park", "workflows": workflows, "senders": c}, &a); err != nil {
		return nil, err
	}
	if len(a.IDs) != workflows {
		return nil, fmt.Errorf("runner started %d workflows, not %d", len(a.IDs), workflows)
	}
	return a.IDs, nil
}

// deliver signals the workflows the last park started, which are ids.
func (t *temporalPeer) deliver(_ context.Context, ids []string, c int) (sent, returned []time.Time, err error) {
	var a struct {
		Sent     []int64 `json:"sent"`
		Returned []int64 `json:"returned"`
	}
	if err := t.call(map[string]any{"op": "deliver", "senders": c}, &a); err != nil {
		return nil, nil, err
	}
	if len(a.Sent) != len(ids) || len(a.Returned) != len(ids) {
		return nil, nil, fmt.Errorf("runner signalled %d workflows, not %d", len(a.Sent), len(ids))
	}
	sent, returned = make([]time.Time, len(ids)), make([]time.Time, len(ids))
	for i := range ids {
		sent[i], returned[i] = time.Unix(0, a.Sent[i]), time.Unix(0, a.Returned[i])
	}
	return sent, returned, nil
}

func (t *temporalPeer) touchIdle(context.Context) (int, error) {
	var a struct {
		Touched int `json:"touched"`
	}
	err := t.call(map[string]string{"op": "touch"}, &a)
	return a.Touched, err
}

// countParked counts the workflows whose first workflow task completed: its history
// then holds the workflow's start, that task scheduled, started and completed, so the
// next event is the fifth. The workflow waits on its signal channel from then on.
func (t *temporalPeer) countParked(ctx context.Context, p *probe, ids []string) (int, error) {
	var n int
	err := p.queryRow(ctx, `SELECT count(*) FROM executions WHERE workflow_id = ANY($1::text[]) AND next_event_id >= 5`, ids).Scan(&n)
	return n, err
}

// completions reads each workflow's close time from the visibility table (status 2:
// completed), the completing event's time as the history service stamped it. The
// visibility row is written after the completion commits, from the history service's
// visibility queue: counting on it waits for that write, and does not move the stamp.
func (t *temporalPeer) completions(ctx context.Context, p *probe, ids []string) ([]time.Time, error) {
	return pollCompletions(ctx, p, ids,
		`SELECT count(*) FROM executions_visibility WHERE workflow_id = ANY($1::text[]) AND status = 2`,
		`SELECT workflow_id, close_time FROM executions_visibility WHERE workflow_id = ANY($1::text[])`,
		func(rows pgx.Rows) (string, time.Time, error) {
			var id string
			var at time.Time
			err := rows.Scan(&id, &at)
			return id, at, err
		})
}

// tail keeps the last max bytes written to it: the runner's log, shown when it fails.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// say is the kept log as the end of an error message, or nothing.
func (t *tail) say() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.b) == 0 {
		return ""
	}
	return "; its last log lines:\n" + string(t.b)
}
