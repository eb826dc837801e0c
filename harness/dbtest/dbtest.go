// Package dbtest gives each test a migrated PostgreSQL schema of its own on a real
// server, so tests run in parallel without seeing each other's rows and without mocks.
//
// The server is chosen once per test process, in this order:
//  1. RENDEZVOUS_TEST_DATABASE_URL, when set;
//  2. a testcontainers-go PostgreSQL container, when a Docker engine answers;
//  3. the local server at 127.0.0.1:5432 (user postgres, database test).
//
// When none is reachable the test fails with a message naming all three; it never skips.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/rendezvous-run/rendezvous/db"
)

// EnvURL names the variable that points tests at a specific server.
const EnvURL = "RENDEZVOUS_TEST_DATABASE_URL"

// LocalURL is the server every project machine runs.
const LocalURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error
)

// ServerURL returns the URL of the server tests use (without a schema), choosing it on
// first call.
func ServerURL(tb testing.TB) string {
	tb.Helper()
	serverOnce.Do(func() { serverURL, serverErr = chooseServer() })
	if serverErr != nil {
		tb.Fatal(serverErr)
	}
	return serverURL
}

func chooseServer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var tried []string
	if url := os.Getenv(EnvURL); url != "" {
		if err := ping(ctx, url); err != nil {
			return "", fmt.Errorf("dbtest: %s is set but unusable: %w", EnvURL, err)
		}
		return url, nil
	}
	tried = append(tried, EnvURL+" is not set")
	if url, err := startContainer(ctx); err == nil {
		return url, nil
	} else {
		tried = append(tried, "no Docker engine for testcontainers-go ("+err.Error()+")")
	}
	if err := ping(ctx, LocalURL); err == nil {
		return LocalURL, nil
	} else {
		tried = append(tried, "local PostgreSQL at 127.0.0.1:5432 unreachable ("+err.Error()+")")
	}
	return "", fmt.Errorf("dbtest: no PostgreSQL for tests: %s. Set %s, start a Docker engine, or start the local server (pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start)",
		strings.Join(tried, "; "), EnvURL)
}

func startContainer(ctx context.Context) (string, error) {
	// Ask the engine first with a short deadline: on machines without Docker this must
	// answer "no" in milliseconds, not after testcontainers' own retries.
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", err
	}
	if err := provider.Health(pctx); err != nil {
		return "", err
	}
	c, err := tcpostgres.Run(ctx, "postgres:16-alpine",
		tcpostgres.WithDatabase("test"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		return "", err
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}

func ping(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// Schema is an isolated, migrated schema on the test server.
type Schema struct {
	Name string
	// URL connects with search_path set to the schema: hand it to anything (a pool, a
	// child process) that should see only this test's tables.
	URL string
}

// NewSchema creates a fresh schema, applies every migration to it, and drops it when
// the test ends.
func NewSchema(tb testing.TB) Schema {
	tb.Helper()
	base := ServerURL(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "rdv_test_" + hex.EncodeToString(b[:])
	ctx := context.Background()

	admin, err := connect(ctx, base)
	if err != nil {
		tb.Fatalf("dbtest: connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("dbtest: create schema: %v", err)
	}
	tb.Cleanup(func() {
		c, err := connect(context.Background(), base)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE")
	})
	s := Schema{Name: name, URL: withSearchPath(base, name)}

	for deadline := time.Now().Add(busyWait); ; time.Sleep(100 * time.Millisecond) {
		err = migrate(ctx, s.URL)
		if err == nil || !serverBusy(err) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	return s
}

// migrate applies every migration to the schema url names.
func migrate(ctx context.Context, url string) error {
	pool, err := db.Connect(ctx, url, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := db.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// busyWait bounds how long a test waits for the server to accept a connection while
// every one of its connection slots is taken (the whole suite's packages share one
// server and run side by side).
const busyWait = 30 * time.Second

// serverBusy reports the server refusing a connection because all its slots are taken
// (SQLSTATE 53300): a moment's load, not a failure of the test.
func serverBusy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53300"
}

// connect connects to url, waiting up to busyWait while the server is full.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	for deadline := time.Now().Add(busyWait); ; time.Sleep(100 * time.Millisecond) {
		conn, err := pgx.Connect(ctx, url)
		if err == nil || !serverBusy(err) || time.Now().After(deadline) {
			return conn, err
		}
	}
}

// NewPool returns a pool on a fresh migrated schema, closed when the test ends.
func NewPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	s := NewSchema(tb)
	pool, err := db.Connect(context.Background(), s.URL, 10)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

func withSearchPath(url, schema string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "search_path=" + schema
}
