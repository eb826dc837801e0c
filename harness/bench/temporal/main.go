// Command temporal-peer is the Temporal side of rendezvous-bench's peer comparison: a
// self-hosted Temporal server (frontend, history and matching in this one process, as
// Temporal's development server runs them) on PostgreSQL, a worker of the Go SDK, and the
// load — workflows that each park on a signal, then one signal to each.
//
// It is a module of its own so that neither Temporal's server nor its SDK enters the
// product's go.mod: the bench builds it and runs it as a subprocess. It speaks JSON
// lines: on standard output one line {"ready":true} once the server and the worker run,
// then one answer per command read from standard input:
//
//	{"op":"park","workflows":N,"senders":C}  → {"ids":[…]}          N workflows started by C starters
//	{"op":"deliver","senders":C}             → {"sent":[…],"returned":[…]}  one signal to each parked workflow, unix nanoseconds
//	{"op":"touch"}                           → {"touched":n}         SELECT 1 on every idle connection of the server's pools
//
// An error answers {"error":"…"}. It stops (worker, then server) when standard input
// closes. Its log lines, at warn and above, go to standard error.
package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iancoleman/strcase"
	_ "github.com/jackc/pgx/v5/stdlib" // the pgx driver of database/sql, which the connections below open
	"github.com/jmoiron/sqlx"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	persistencespb "go.temporal.io/server/api/persistence/v1"
	"go.temporal.io/server/common"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/persistence/serialization"
	"go.temporal.io/server/common/persistence/sql"
	"go.temporal.io/server/common/persistence/sql/sqlplugin"
	"go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
	"go.temporal.io/server/common/primitives"
	"go.temporal.io/server/common/primitives/timestamp"
	"go.temporal.io/server/common/resolver"
	pgschema "go.temporal.io/server/schema/postgresql/v12"
	"go.temporal.io/server/temporal"
	"go.temporal.io/server/tools/common/schema"
	sqltool "go.temporal.io/server/tools/sql"
)

const (
	namespace  = "bench"
	taskQueue  = "bench"
	signalName = "go"
	// workflowName is the registered name of parked.
	workflowName = "Parked"
)

// parked is the workflow: it waits for one signal and completes with its value.
func parked(ctx workflow.Context) (string, error) {
	var v string
	workflow.GetSignalChannel(ctx, signalName).Receive(ctx, &v)
	return v, nil
}

func main() {
	dbURL := flag.String("database-url", "", "PostgreSQL database of Temporal's own (its schema is applied here; the database must be empty)")
	conns := flag.Int("conns", 16, "connections of each service's main store pool (frontend, history and matching have one each)")
	visConns := flag.Int("visibility-conns", 4, "connections of each service's visibility store pool")
	shards := flag.Int("shards", 4, "history shards")
	pollers := flag.Int("pollers", 16, "the worker's workflow task pollers")
	flag.Parse()
	if err := run(*dbURL, *conns, *visConns, int32(*shards), *pollers, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "temporal-peer:", err)
		os.Exit(1)
	}
}

// run starts the server and the worker on the database at dbURL, then answers the
// commands read from in on out until in ends.
func run(dbURL string, conns, visConns int, shards int32, pollers int, in io.Reader, out io.Writer) error {
	ctx := context.Background()
	logger := log.NewZapLogger(log.BuildZapLogger(log.Config{Level: "warn", OutputFile: "/dev/stderr"}))
	pools := &poolSet{}
	mainStore, err := sqlConfig(dbURL, conns, pools)
	if err != nil {
		return err
	}
	visStore := *mainStore
	visStore.MaxConns, visStore.MaxIdleConns = visConns, visConns

	if err := applySchema(mainStore, logger); err != nil {
		return err
	}
	if err := createNamespace(mainStore, logger); err != nil {
		return err
	}

	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	cfg := serverConfig(mainStore, &visStore, shards, ports)
	srv, err := temporal.NewServer(
		temporal.ForServices([]string{string(primitives.FrontendService), string(primitives.HistoryService), string(primitives.MatchingService)}),
		temporal.WithConfig(cfg),
		temporal.WithLogger(logger),
		temporal.WithCustomMetricsHandler(metrics.NoopMetricsHandler),
		temporal.WithDynamicConfigClient(raisedLimits()),
		// No membership ring (and so no heartbeats written to the database): one host
		// of each service, this process.
		temporal.WithStaticHosts(map[primitives.ServiceName]static.Hosts{
			primitives.FrontendService: {All: []string{addr(0)}, Self: addr(0)},
			primitives.HistoryService:  {All: []string{addr(1)}, Self: addr(1)},
			primitives.MatchingService: {All: []string{addr(2)}, Self: addr(2)},
			primitives.WorkerService:   {All: []string{addr(3)}},
		}),
	)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	defer func() { _ = srv.Stop() }()

	c, err := dialClient(ctx, addr(0))
	if err != nil {
		return err
	}
	defer c.Close()
	w := worker.New(c, taskQueue, worker.Options{MaxConcurrentWorkflowTaskPollers: pollers})
	w.RegisterWorkflowWithOptions(parked, workflow.RegisterOptions{Name: workflowName})
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	defer w.Stop()

	enc := json.NewEncoder(out)
	if err := enc.Encode(map[string]bool{"ready": true}); err != nil {
		return err
	}
	l := &load{c: c}
	lines := bufio.NewScanner(in)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		var cmd struct {
			Op        string `json:"op"`
			Workflows int    `json:"workflows"`
			Senders   int    `json:"senders"`
		}
		var answer any
		if err := json.Unmarshal(lines.Bytes(), &cmd); err != nil {
			answer = failure(err)
		} else {
			answer = l.do(ctx, cmd.Op, cmd.Workflows, cmd.Senders, pools)
		}
		if err := enc.Encode(answer); err != nil {
			return err
		}
	}
	return lines.Err()
}

func failure(err error) map[string]string { return map[string]string{"error": err.Error()} }

// load runs the commands; ids are the workflows the last park started.
type load struct {
	c   client.Client
	ids []string
}

func (l *load) do(ctx context.Context, op string, workflows, senders int, pools *poolSet) any {
	switch op {
	case "park":
		ids := make([]string, workflows)
		err := fanOut(senders, workflows, func(i int) error {
			var b [16]byte
			_, _ = rand.Read(b[:])
			ids[i] = hex.EncodeToString(b[:])
			_, err := l.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: ids[i], TaskQueue: taskQueue}, workflowName)
			return err
		})
		if err != nil {
			return failure(fmt.Errorf("start: %w", err))
		}
		l.ids = ids
		return map[string][]string{"ids": ids}
	case "deliver":
		sent, returned := make([]int64, len(l.ids)), make([]int64, len(l.ids))
		err := fanOut(senders, len(l.ids), func(i int) error {
			sent[i] = time.Now().UnixNano()
			err := l.c.SignalWorkflow(ctx, l.ids[i], "", signalName, "bench")
			returned[i] = time.Now().UnixNano()
			return err
		})
		if err != nil {
			return failure(fmt.Errorf("signal: %w", err))
		}
		return map[string][]int64{"sent": sent, "returned": returned}
	case "touch":
		return map[string]int{"touched": pools.touch(ctx)}
	default:
		return failure(fmt.Errorf("unknown op %q", op))
	}
}

// fanOut runs do(0 … n-1) on c goroutines and returns the first error.
func fanOut(c, n int, do func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range max(c, 1) {
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

// poolSet holds every connection pool the server opened, so that touch can reach them.
type poolSet struct {
	mu  sync.Mutex
	dbs []*sqlx.DB
}

// open opens a pool as Temporal's postgresql plugin does (session.createConnection),
// and keeps it.
func (p *poolSet) open(cfg *config.SQL) (*sqlx.DB, error) {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(cfg.User, cfg.Password), Host: cfg.ConnectAddr,
		Path: "/" + cfg.DatabaseName, RawQuery: "sslmode=disable"}
	db, err := sqlx.Connect("pgx", u.String())
	if err != nil {
		return nil, err
	}
	if cfg.MaxConns > 0 {
		db.SetMaxOpenConns(cfg.MaxConns)
	}
	if cfg.MaxIdleConns > 0 {
		db.SetMaxIdleConns(cfg.MaxIdleConns)
	}
	if cfg.MaxConnLifetime > 0 {
		db.SetConnMaxLifetime(cfg.MaxConnLifetime)
	}
	db.MapperFunc(strcase.ToSnake)
	p.mu.Lock()
	p.dbs = append(p.dbs, db)
	p.mu.Unlock()
	return db, nil
}

// touch runs SELECT 1 on every idle connection of every pool and says on how many.
// PostgreSQL reports a backend's statistics when it goes idle, at most once a second,
// else only after ten idle seconds: the bench's reading of the database's counters
// touches every idle connection first, as it does the other systems' pools, and takes
// these statements out of Temporal's transactions.
func (p *poolSet) touch(ctx context.Context) int {
	p.mu.Lock()
	dbs := append([]*sqlx.DB(nil), p.dbs...)
	p.mu.Unlock()
	touched := 0
	for _, db := range dbs {
		idle := db.Stats().Idle
		held := make([]*sqlx.Conn, 0, idle)
		for range idle {
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			conn, err := db.Connx(cctx)
			cancel()
			if err != nil {
				break // closed, or every connection in use meanwhile
			}
			held = append(held, conn)
			if _, err := conn.ExecContext(ctx, "SELECT 1"); err == nil {
				touched++
			}
		}
		for _, conn := range held {
			_ = conn.Close()
		}
	}
	return touched
}

// sqlConfig is the main store's configuration for the database at dbURL.
func sqlConfig(dbURL string, conns int, pools *poolSet) (*config.SQL, error) {
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" || len(u.Path) < 2 {
		return nil, fmt.Errorf("--database-url: want postgres://user[:password]@host:port/database, got %q", dbURL)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5432")
	}
	pw, _ := u.User.Password()
	return &config.SQL{
		PluginName: postgresql.PluginNamePGX, DatabaseName: u.Path[1:], ConnectAddr: host, ConnectProtocol: "tcp",
		User: u.User.Username(), Password: pw, MaxConns: conns, MaxIdleConns: conns, MaxConnLifetime: time.Hour,
		Connect: pools.open,
	}, nil
}

// applySchema applies Temporal's PostgreSQL schema, embedded in the server module, with
// its own schema tool: the main schema at its version, then the visibility schema in the
// same database. The visibility tables have no version of their own there: the server
// checks each store's recorded version against the one it expects, and the main
// schema's version is above the visibility schema's.
func applySchema(cfg *config.SQL, logger log.Logger) error {
	conn, err := sqltool.NewConnection(cfg, logger)
	if err != nil {
		return fmt.Errorf("schema: connect: %w", err)
	}
	defer conn.Close()
	for _, s := range []schema.SetupConfig{
		{SchemaName: "postgresql/v12/temporal", InitialVersion: pgschema.Version},
		{SchemaName: "postgresql/v12/visibility", DisableVersioning: true},
	} {
		if err := schema.NewSetupSchemaTask(conn, &s, logger).Run(); err != nil {
			return fmt.Errorf("schema %s: %w", s.SchemaName, err)
		}
	}
	return nil
}

// createNamespace registers the bench's namespace in the database before the server
// starts, so that every service's namespace cache has it from the first read.
func createNamespace(cfg *config.SQL, logger log.Logger) error {
	db, err := sql.NewSQLDB(sqlplugin.DbKindMain, cfg, resolver.NewNoopResolver(), logger, metrics.NoopMetricsHandler)
	if err != nil {
		return fmt.Errorf("namespace: connect: %w", err)
	}
	defer db.Close()
	id := primitives.NewUUID()
	detail := &persistencespb.NamespaceDetail{
		Info: &persistencespb.NamespaceInfo{Id: id.String(), State: enumspb.NAMESPACE_STATE_REGISTERED, Name: namespace},
		Config: &persistencespb.NamespaceConfig{
			Retention:            timestamp.DurationFromHours(24),
			HistoryArchivalState: enumspb.ARCHIVAL_STATE_DISABLED, VisibilityArchivalState: enumspb.ARCHIVAL_STATE_DISABLED,
		},
		ReplicationConfig: &persistencespb.NamespaceReplicationConfig{ActiveClusterName: clusterName, Clusters: []string{clusterName}},
		FailoverVersion:   common.EmptyVersion, FailoverNotificationVersion: -1,
	}
	blob, err := serialization.NewSerializer().NamespaceDetailToBlob(detail)
	if err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	if _, err := db.InsertIntoNamespace(context.Background(), &sqlplugin.NamespaceRow{
		ID: id, Name: namespace, Data: blob.GetData(), DataEncoding: blob.GetEncodingType().String(),
	}); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	return nil
}

const clusterName = "active"

// serverConfig is the server's static configuration: both stores in the one database,
// shards history shards, the services on the loopback ports given (frontend, history,
// matching, and the worker service's, which is not run but must be named).
func serverConfig(mainStore, visStore *config.SQL, shards int32, ports []int) *config.Config {
	frontend := "127.0.0.1:" + strconv.Itoa(ports[0])
	svc := func(port int) config.Service {
		return config.Service{RPC: config.RPC{GRPCPort: port, BindOnIP: "127.0.0.1"}}
	}
	return &config.Config{
		Global: config.Global{Membership: config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: "127.0.0.1"}},
		Persistence: config.Persistence{
			DefaultStore: "default", VisibilityStore: "visibility", NumHistoryShards: shards,
			DataStores: map[string]config.DataStore{"default": {SQL: mainStore}, "visibility": {SQL: visStore}},
		},
		ClusterMetadata: &cluster.Config{
			EnableGlobalNamespace: false, FailoverVersionIncrement: 10, MasterClusterName: clusterName, CurrentClusterName: clusterName,
			ClusterInformation: map[string]cluster.ClusterInformation{
				clusterName: {Enabled: true, InitialFailoverVersion: 1, RPCAddress: frontend},
			},
		},
		DCRedirectionPolicy: config.DCRedirectionPolicy{Policy: "noop"},
		Services: map[string]config.Service{
			"frontend": svc(ports[0]), "history": svc(ports[1]), "matching": svc(ports[2]), "worker": svc(ports[3]),
		},
		Archival: config.Archival{
			History:    config.HistoryArchival{State: "disabled"},
			Visibility: config.VisibilityArchival{State: "disabled"},
		},
		NamespaceDefaults: config.NamespaceDefaults{Archival: config.ArchivalNamespaceDefaults{
			History:    config.HistoryArchivalNamespaceDefaults{State: "disabled"},
			Visibility: config.VisibilityArchivalNamespaceDefaults{State: "disabled"},
		}},
		PublicClient: config.PublicClient{HostPort: frontend},
	}
}

// raisedLimit is the value every rate limit below is raised to: far above what this
// machine sustains, so that only the work itself bounds Temporal's rates.
const raisedLimit = 1_000_000

// raisedLimits raises the server's request and persistence rate limits (defaults:
// frontend 2 400 requests/s per instance and per namespace, history 3 000, matching
// 1 200; persistence 2 000, 9 000 and 3 000 queries/s) and the frontend's concurrent
// long polls per namespace (1 200).
func raisedLimits() dynamicconfig.StaticClient {
	return dynamicconfig.StaticClient{
		dynamicconfig.FrontendRPS.Key():                                         raisedLimit,
		dynamicconfig.FrontendMaxNamespaceRPSPerInstance.Key():                  raisedLimit,
		dynamicconfig.FrontendMaxConcurrentLongRunningRequestsPerInstance.Key(): raisedLimit,
		dynamicconfig.HistoryRPS.Key():                                          raisedLimit,
		dynamicconfig.MatchingRPS.Key():                                         raisedLimit,
		dynamicconfig.FrontendPersistenceMaxQPS.Key():                           raisedLimit,
		dynamicconfig.HistoryPersistenceMaxQPS.Key():                            raisedLimit,
		dynamicconfig.MatchingPersistenceMaxQPS.Key():                           raisedLimit,
		dynamicconfig.VisibilityPersistenceMaxReadQPS.Key():                     raisedLimit,
		dynamicconfig.VisibilityPersistenceMaxWriteQPS.Key():                    raisedLimit,
	}
}

// dialClient connects the SDK's client to the frontend, retrying while it comes up.
func dialClient(ctx context.Context, frontend string) (client.Client, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := client.DialContext(ctx, client.Options{HostPort: frontend, Namespace: namespace,
			Logger: sdkQuiet{}})
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("dial frontend: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// freePorts reserves n loopback ports the kernel chooses, then frees them for the
// server's listeners.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// sdkQuiet is the SDK's logger: its warnings and errors to standard error, as the
// server's; its debug and info lines dropped.
type sdkQuiet struct{}

func (sdkQuiet) Debug(string, ...any) {}
func (sdkQuiet) Info(string, ...any)  {}
func (sdkQuiet) Warn(msg string, kv ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"sdk warn:", msg}, kv...)...)
}
func (sdkQuiet) Error(msg string, kv ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"sdk error:", msg}, kv...)...)
}
