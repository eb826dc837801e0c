package pgproxy_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/testkit"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/pgproxy"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

func TestProxiedURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable&search_path=s1",
			"postgres://postgres@127.0.0.1:40001/test?sslmode=disable&search_path=s1"},
		{"postgresql://u:p%40ss@db.example:6543/x", "postgresql://u:p%40ss@127.0.0.1:40001/x"},
		{"postgres://u@localhost/x", "postgres://u@127.0.0.1:40001/x"},
		{"host=db port=5432 user=u dbname=x", "user=u dbname=x host=127.0.0.1 port=40001"},
	} {
		require.Equal(t, tc.want, pgproxy.ProxiedURL(tc.in, "127.0.0.1:40001"), tc.in)
	}

	hp, err := pgproxy.HostPort("postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:5432", hp)
	hp, err = pgproxy.HostPort("postgres://u@localhost/x")
	require.NoError(t, err)
	require.Equal(t, "localhost:5432", hp)
	hp, err = pgproxy.HostPort("host=db port=6000 dbname=x")
	require.NoError(t, err)
	require.Equal(t, "db:6000", hp)
	_, err = pgproxy.HostPort("dbname=x")
	require.Error(t, err)
}

// echoServer echoes every connection until the test ends.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// roundTrip writes msg and reads it back; it reports an error when the connection is
// (or gets) closed.
func roundTrip(c net.Conn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return err
}

func TestProxyCutRestore(t *testing.T) {
	t.Parallel()
	p := dbtest.StartProxy(t, echoServer(t))

	c1, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c1.Close()
	require.NoError(t, roundTrip(c1, "hello"))

	p.Cut()
	require.Error(t, roundTrip(c1, "again"), "a connection open at the cut is closed")
	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err, "the proxy still accepts")
	defer c2.Close()
	require.Error(t, roundTrip(c2, "x"), "but closes new connections while cut")

	p.Restore()
	c3, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c3.Close()
	require.NoError(t, roundTrip(c3, "back"))

	p.Close()
	require.Error(t, roundTrip(c3, "closed"), "Close ends proxied connections")
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	if err == nil {
		t.Log("dial after Close succeeded (port reused by another listener?)")
	}
	p.Close() // idempotent
}

// TestProxyPostgres cuts one pool off the test server while another, direct pool keeps
// working, then restores it.
func TestProxyPostgres(t *testing.T) {
	t.Parallel()
	s := dbtest.NewSchema(t)
	target, err := pgproxy.HostPort(s.URL)
	require.NoError(t, err)
	p := dbtest.StartProxy(t, target)
	ctx := context.Background()

	proxied, err := db.Connect(ctx, pgproxy.ProxiedURL(s.URL, p.Addr()), 2)
	require.NoError(t, err)
	defer proxied.Close()
	direct, err := db.Connect(ctx, s.URL, 1)
	require.NoError(t, err)
	defer direct.Close()

	count := func() (int, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var n int
		err := proxied.QueryRow(ctx, "SELECT count(*) FROM workflows").Scan(&n)
		return n, err
	}
	_, err = count()
	require.NoError(t, err, "the proxied pool sees the schema")

	p.Cut()
	start := time.Now()
	_, err = count()
	require.Error(t, err, "an idle connection is gone")
	require.True(t, db.IsUnavailable(err), "the error reads as unavailable: %v", err)
	_, err = count()
	require.Error(t, err, "new connections are refused")
	require.True(t, db.IsUnavailable(err), "the error reads as unavailable: %v", err)
	require.Less(t, time.Since(start), 5*time.Second, "failing takes no timeout")
	require.NoError(t, direct.Ping(ctx), "other pools are not affected")

	p.Restore()
	require.Eventually(t, func() bool { _, err := count(); return err == nil }, 10*time.Second, 20*time.Millisecond)
}
