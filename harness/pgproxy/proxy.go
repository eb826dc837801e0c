// Package pgproxy is a TCP proxy in front of PostgreSQL for simulating its outage:
// clients connect through the proxy, which can cut every connection and refuse new ones
// until restored, while other clients on the real address are unaffected. The tests'
// database cuts and the chaos run's use it; it has no test-only dependency, so the chaos
// binary links no test framework.
package pgproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 to one target address, for simulating an outage of
// the server behind it: hand ProxiedURL(url, p.Addr()) to the pool under test, then Cut
// and Restore. Other pools on the real address are unaffected.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	cut    bool
	closed bool
	conns  map[net.Conn]struct{} // both ends of every proxied connection
}

// New listens on 127.0.0.1:0 and forwards every connection to target (host:port).
// Close it when done.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgproxy: proxy listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (127.0.0.1:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every current connection and closes each new one at once, until Restore:
// to a client, the server is down.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.takeConns()
	p.mu.Unlock()
	closeAll(conns)
}

// Restore lets new connections through again (the ones Cut closed stay closed).
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops listening, closes every connection, and waits for the proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := p.takeConns()
	p.mu.Unlock()
	_ = p.ln.Close()
	closeAll(conns)
	p.wg.Wait()
}

// takeConns empties the connection set; p.mu must be held.
func (p *Proxy) takeConns() []net.Conn {
	out := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		out = append(out, c)
	}
	clear(p.conns)
	return out
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		_ = c.Close()
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // transient (e.g. too many open files)
			continue
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	refuse := p.cut || p.closed
	p.mu.Unlock()
	if refuse {
		_ = client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	// Register both ends under the lock that Cut and Close take, so that a connection
	// dialled while the proxy was being cut is closed rather than missed.
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[client] = struct{}{}
	p.conns[server] = struct{}{}
	p.mu.Unlock()

	var pipes sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer pipes.Done()
		_, _ = io.Copy(dst, src)
		// One direction ended: end the connection as a whole, as a server going away
		// would.
		_ = dst.Close()
		_ = src.Close()
	}
	pipes.Add(2)
	go pipe(server, client)
	go pipe(client, server)
	pipes.Wait()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

// ProxiedURL returns the PostgreSQL connection string with its host and port replaced by
// proxyAddr. It accepts URLs (postgres://user@host:port/db?opts) and keyword/value
// strings (host=... port=... dbname=...).
func ProxiedURL(connString, proxyAddr string) string {
	host, port, err := net.SplitHostPort(proxyAddr)
	if err != nil {
		panic(fmt.Sprintf("pgproxy: ProxiedURL: proxy address %q: %v", proxyAddr, err))
	}
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			panic(fmt.Sprintf("pgproxy: ProxiedURL: %v", err))
		}
		u.Host = net.JoinHostPort(host, port)
		return u.String()
	}
	var out []string
	for _, f := range strings.Fields(connString) {
		k, _, _ := strings.Cut(f, "=")
		if k != "host" && k != "port" && k != "hostaddr" {
			out = append(out, f)
		}
	}
	return strings.Join(append(out, "host="+host, "port="+port), " ")
}

// HostPort returns the host:port a PostgreSQL URL connects to (port 5432 when absent),
// i.e. the target to hand NewProxy.
func HostPort(connString string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", err
		}
		host, port := u.Hostname(), u.Port()
		if host == "" {
			return "", fmt.Errorf("pgproxy: %q names no host", redactURL(u))
		}
		if port == "" {
			port = "5432"
		}
		return net.JoinHostPort(host, port), nil
	}
	host, port := "", "5432"
	for _, f := range strings.Fields(connString) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "host":
			host = v
		case "port":
			port = v
		}
	}
	if host == "" {
		return "", errors.New("pgproxy: connection string names no host")
	}
	return net.JoinHostPort(host, port), nil
}

func redactURL(u *url.URL) string { return u.Redacted() }
