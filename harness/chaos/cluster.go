package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rendezvous-run/rendezvous/harness/pgproxy"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Replica settings: short enough that deadlines, takeovers and redeliveries happen within
// a run of a few minutes.
const (
	// replicaLease is how long work claimed by a killed replica waits before another
	// takes it: as short as the executor allows (it must exceed the longest http node
	// run, 60 s, plus a margin).
	replicaLease = 70 * time.Second
	// replicaDBConns keeps three replicas (plus their LISTEN connections) well inside a
	// shared server's max_connections.
	replicaDBConns = 8
)

// process is one child process, in a process group of its own so that a kill takes
// everything it started with it.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid after done
}

func startProcess(name, bin string, args, env []string, log io.Writer) (*process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that a kill reaches all of it; and killed with the
	// harness should the harness die without cleaning up (a test timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The death signal follows the thread that forked, not the process, and the
		// runtime may retire an idle thread: keep this one for as long as the child lives.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

func (p *process) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits up to grace for the exit, then kills.
func (p *process) stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		p.kill()
		return fmt.Errorf("%s did not exit %s after SIGTERM; killed", p.name, grace)
	}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// replica is one serve process slot; it keeps its port and instance id across restarts,
// as a pod keeps its name.
type replica struct {
	index int
	addr  string
	log   io.Writer
	// faults serialises the faults on this replica: one stops and restarts it at a
	// time, even when a restart takes longer than the plan allowed for.
	faults sync.Mutex

	mu          sync.Mutex
	proc        *process
	incarnation int
}

// sender names the replica's current process in continuation calls.
func (r *replica) sender() string { return fmt.Sprintf("r%d.%d", r.index, r.incarnation) }

// cluster is the processes under test and what they share.
// chaosToken is the replicas' bootstrap admin token: the driver calls the API as an
// operator would, with a credential, so the cluster runs as deployed (authentication on).
const chaosToken = "chaos-bootstrap-token-0123456789abcdef"

// withToken sends chaosToken with every request of the driver that carries no token of
// its own (the redrives carry the operator's); callbacks ignore it.
type withToken struct{ next http.RoundTripper }

func (w withToken) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") != "" {
		return w.next.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+chaosToken)
	return w.next.RoundTrip(req)
}

type cluster struct {
	cfg    Config
	dir    string
	bin    string
	out    io.Writer
	logs   []*os.File
	dbName string
	// adminURL reaches the server's administrative database, dbURL the run's database
	// directly, replicaURL the run's database as replicas see it (through the proxy).
	adminURL, dbURL, replicaURL string
	proxy                       *pgproxy.Proxy
	kafka                       *process
	kafkaAddr                   string
	group                       string
	adm                         *kadm.Client
	admCl                       *kgo.Client
	replicas                    []*replica
	fakeURL                     string
	// extraArgs go after the replicas' own flags, so a test can change one of them.
	extraArgs []string
}

// replicaLogName is the name of replica i's log file, which every incarnation of it
// appends to.
func replicaLogName(i int) string { return "replica-" + strconv.Itoa(i) }

// replicaLog is the path of replica i's log file.
func (c *cluster) replicaLog(i int) string { return filepath.Join(c.dir, replicaLogName(i)+".log") }

func (c *cluster) logFile(name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(c.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	c.logs = append(c.logs, f)
	return f, nil
}

// buildBinary compiles cmd/rendezvous of the module containing the working directory.
func buildBinary(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module (go env GOMOD): %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the rendezvous module: run from its directory or pass --binary")
	}
	bin := filepath.Join(dir, "rendezvous")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/rendezvous")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/rendezvous: %w\n%s", err, out)
	}
	return bin, nil
}

// withDatabase returns url pointing at database name.
func withDatabase(raw, name string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("database_url: must be a postgres:// URL")
	}
	u.Path = "/" + name
	return u.String(), nil
}

// dbPrefix starts the name of every run's database: rendezvous_chaos_<seed>_<pid>.
const dbPrefix = "rendezvous_chaos_"

// createDatabase creates the run's database, after dropping those left by runs on this
// machine that died without cleaning up; dropDatabase removes it with whatever is still
// connected.
func (c *cluster) createDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.adminURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redacted(c.adminURL), err)
	}
	defer conn.Close(context.Background())
	dropStale(ctx, conn, c.out)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{c.dbName}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", c.dbName, err)
	}
	return nil
}

func (c *cluster) dropDatabase() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var conn *pgx.Conn
	var err error
	// The server may be coming back from a restart.
	for range 20 {
		if conn, err = pgx.Connect(ctx, c.adminURL); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("drop database %s: %w", c.dbName, err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{c.dbName}.Sanitize()+" WITH (FORCE)")
	if err != nil {
		return fmt.Errorf("drop database %s: %w", c.dbName, err)
	}
	return nil
}

// dropStale drops the databases of earlier runs whose process is gone and that nobody
// is connected to. Best effort: a failure leaves them for the next run.
func dropStale(ctx context.Context, conn *pgx.Conn, out io.Writer) {
	rows, err := conn.Query(ctx, `SELECT d.datname FROM pg_database d
		WHERE starts_with(d.datname, $1) AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname = d.datname)`, dbPrefix)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		pid, err := strconv.Atoi(name[strings.LastIndex(name, "_")+1:])
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // not ours, or its run may still be alive
		}
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err == nil {
			fmt.Fprintf(out, "chaos: dropped %s, left by a run that died\n", name)
		}
	}
}

func redacted(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "the database"
}

func (c *cluster) migrate(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, c.bin, "migrate", "--database-url", c.dbURL, "--log-format", "text")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rendezvous migrate: %w\n%s", err, out)
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startKafka runs `rendezvous dev-kafka` and creates the event topic.
func (c *cluster) startKafka(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	log, err := c.logFile("dev-kafka")
	if err != nil {
		return err
	}
	if c.kafka, err = startProcess("dev-kafka", c.bin, []string{"dev-kafka", "--port", strconv.Itoa(port)}, nil, log); err != nil {
		return err
	}
	c.kafkaAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if c.admCl, err = kgo.NewClient(kgo.SeedBrokers(c.kafkaAddr)); err != nil {
		return fmt.Errorf("kafka admin client: %w", err)
	}
	c.adm = kadm.NewClient(c.admCl)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resps, err := c.adm.CreateTopics(ctx, TopicPartitions, 1, nil, consumedTopics...)
		if err == nil {
			// A retry finds the topics an earlier attempt created.
			for _, t := range resps.Sorted() {
				if t.Err != nil && !errors.Is(t.Err, kerr.TopicAlreadyExists) {
					err = errors.Join(err, fmt.Errorf("%s: %w", t.Topic, t.Err))
				}
			}
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("create topics %v on %s: %w", consumedTopics, c.kafkaAddr, err)
		}
		if c.kafka.exited() {
			return fmt.Errorf("dev-kafka exited: %v (see %s)", c.kafka.err, log.Name())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startReplica starts (or restarts) replica i and returns once its process runs; ready
// says when it serves.
func (c *cluster) startReplica(r *replica) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.incarnation++
	args := []string{
		"serve",
		"--database-url", c.replicaURL,
		"--no-migrate",
		"--http-addr", r.addr,
		"--instance-id", instanceID(r.index),
		"--kafka-brokers", c.kafkaAddr,
		"--kafka-group", c.group,
		"--kafka-session-timeout", c.cfg.SessionTimeout.String(),
		"--db-max-conns", strconv.Itoa(replicaDBConns),
		"--lease", replicaLease.String(),
		"--poll-interval", "200ms",
		// Waits registered on another replica are noticed within a second even when
		// their own replica was killed.
		"--sweep-max-sleep", "1s",
		"--shutdown-timeout", "5s",
		"--outbox-max-attempts", "20",
		// The fake service listens on loopback.
		"--outbound-allow", "127.0.0.1",
		// Every callback comes from the driver's one address, at the pace the run asks.
		"--callback-rate-per-source", "-1",
		"--log-format", "json",
		// The checks find every sent record's trace in unmatched_events: keep them all.
		"--unmatched-retention", "1000000",
	}
	args = append(args, c.extraArgs...)
	fmt.Fprintf(r.log, "\n=== chaos: starting incarnation %d of replica %d at %s\n", r.incarnation, r.index, time.Now().Format(time.RFC3339Nano))
	env := []string{"RENDEZVOUS_VAR_SENDER=" + r.sender(), "RENDEZVOUS_BOOTSTRAP_TOKEN=" + chaosToken}
	p, err := startProcess(fmt.Sprintf("replica %d", r.index), c.bin, args, env, r.log)
	if err != nil {
		return err
	}
	r.proc = p
	return nil
}

// waitReady waits until the replica's /readyz answers 200 (database, migrations and a
// Kafka broker all answer).
func (c *cluster) waitReady(ctx context.Context, r *replica, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		r.mu.Lock()
		p := r.proc
		r.mu.Unlock()
		if p.exited() {
			return fmt.Errorf("replica %d exited: %v", r.index, p.err)
		}
		resp, err := client.Get("http://" + r.addr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("replica %d not ready after %s", r.index, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// instanceID names replica i in claims, resumed_by and the consumer group (its client id).
func instanceID(i int) string { return fmt.Sprintf("chaos-r%d", i) }

// waitGroupStable waits until the consumer group is stable with members members and
// every partition of topics assigned, so the run starts on a settled group.
func (c *cluster) waitGroupStable(ctx context.Context, members int, topics []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "not described yet"
	for {
		groups, err := c.adm.DescribeGroups(ctx, c.group)
		if err == nil {
			if g, ok := groups[c.group]; ok && g.Err == nil {
				assigned := 0
				for topic, ps := range g.AssignedPartitions() {
					if slices.Contains(topics, topic) {
						assigned += len(ps)
					}
				}
				want := len(topics) * TopicPartitions
				last = fmt.Sprintf("state %s, %d members, %d of %d partitions assigned", g.State, len(g.Members), assigned, want)
				if g.State == "Stable" && len(g.Members) == members && assigned == want {
					return nil
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("consumer group %s not stable after %s: %s", c.group, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lag returns, per partition ("topic/partition") of both topics, end offset minus the
// group's committed offset (the whole end offset when nothing is committed).
func (c *cluster) lag(ctx context.Context) (map[string]int64, error) {
	ends, err := c.adm.ListEndOffsets(ctx, consumedTopics...)
	if err != nil {
		return nil, err
	}
	committed, err := c.adm.FetchOffsets(ctx, c.group)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, o.Err)
			return
		}
		at := int64(0)
		if cm, ok := committed.Lookup(o.Topic, o.Partition); ok && cm.Err == nil {
			at = cm.At
		}
		out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset - at
	})
	return out, errors.Join(errs...)
}

// restartPostgres restarts the cluster serving the database's port with pg_ctlcluster,
// and returns once the server accepts connections again.
func (c *cluster) restartPostgres(ctx context.Context) error {
	u, err := url.Parse(c.dbURL)
	if err != nil {
		return err
	}
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	out, err := exec.CommandContext(ctx, "pg_lsclusters", "--no-header").Output()
	if err != nil {
		return fmt.Errorf("pg_lsclusters: %w", err)
	}
	var version, name string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[2] == port {
			version, name = f[0], f[1]
		}
	}
	if version == "" {
		return fmt.Errorf("no PostgreSQL cluster of pg_lsclusters listens on port %s", port)
	}
	cmd := exec.CommandContext(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", version, name, "restart")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctlcluster %s %s restart: %w\n%s", version, name, err, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.dbURL)
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("PostgreSQL not back 60 s after restart: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// close stops every process (the replicas with SIGTERM first, so they leave the group),
// the proxy and the admin client.
func (c *cluster) close() {
	var wg sync.WaitGroup
	for _, r := range c.replicas {
		r.mu.Lock()
		p := r.proc
		r.mu.Unlock()
		if p != nil && !p.exited() {
			wg.Add(1)
			go func() { defer wg.Done(); _ = p.stop(15 * time.Second) }()
		}
	}
	wg.Wait()
	if c.admCl != nil {
		c.admCl.Close()
	}
	if c.kafka != nil && !c.kafka.exited() {
		_ = c.kafka.stop(5 * time.Second)
	}
	if c.proxy != nil {
		c.proxy.Close()
	}
	for _, f := range c.logs {
		_ = f.Close()
	}
}
