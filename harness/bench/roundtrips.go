package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
)

// roundTripCounter is a TCP proxy in front of PostgreSQL that counts the round trips
// its clients make: the frontend messages after which a client waits for the server's
// ReadyForQuery — Sync (an extended-protocol statement, or a whole pipelined batch) and
// Query (a simple-protocol statement, as BEGIN and COMMIT can be). It counts the
// statements run too: Execute (one extended-protocol statement, pipelined or not) and
// Query. It reads only the client's side of the wire: a message's type byte and length.
// The bench points a replica's pool at it to count what one callback costs in round
// trips and statements, the replica's background loops included.
type roundTripCounter struct {
	ln         net.Listener
	target     string
	trips      atomic.Int64
	statements atomic.Int64
	wg         sync.WaitGroup
	mu         sync.Mutex
	conns      []net.Conn
}

func newRoundTripCounter(target string) (*roundTripCounter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &roundTripCounter{ln: ln, target: target}
	c.wg.Add(1)
	go c.accept()
	return c, nil
}

// count is the round trips counted so far.
func (c *roundTripCounter) count() int64 { return c.trips.Load() }

// statementCount is the statements counted so far.
func (c *roundTripCounter) statementCount() int64 { return c.statements.Load() }

// url is dbURL (a postgres:// URL) pointed at the counter.
func (c *roundTripCounter) url(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", err
	}
	u.Host = c.ln.Addr().String()
	q := u.Query()
	if q.Get("sslmode") == "" || q.Get("sslmode") == "prefer" {
		// The counter reads the client's plain messages.
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (c *roundTripCounter) close() {
	_ = c.ln.Close()
	c.mu.Lock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

func (c *roundTripCounter) accept() {
	defer c.wg.Done()
	for {
		client, err := c.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", c.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		c.mu.Lock()
		c.conns = append(c.conns, client, server)
		c.mu.Unlock()
		c.wg.Add(2)
		go func() {
			defer c.wg.Done()
			_, _ = io.Copy(client, server)
			_ = client.Close()
		}()
		go func() {
			defer c.wg.Done()
			_ = c.forward(server, client)
			_ = server.Close()
		}()
	}
}

// forward copies the client's messages to the server, counting Sync and Query as round
// trips, Execute and Query as statements.
func (c *roundTripCounter) forward(server io.Writer, client io.Reader) error {
	// The startup message has no type byte: a length, a code, then the rest. An
	// encryption request (SSLRequest, GSSENCRequest), which the server refuses in one
	// byte, comes before it.
	var head [8]byte
	for {
		if _, err := io.ReadFull(client, head[:8]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(head[:4])
		if n < 8 {
			return errors.New("short startup message")
		}
		if _, err := server.Write(head[:8]); err != nil {
			return err
		}
		if _, err := io.CopyN(server, client, int64(n-8)); err != nil {
			return err
		}
		if code := binary.BigEndian.Uint32(head[4:8]); code != 80877103 && code != 80877104 {
			break
		}
	}
	for {
		if _, err := io.ReadFull(client, head[:5]); err != nil {
			return err
		}
		switch head[0] {
		case 'S':
			c.trips.Add(1)
		case 'Q':
			c.trips.Add(1)
			c.statements.Add(1)
		case 'E':
			c.statements.Add(1)
		}
		n := binary.BigEndian.Uint32(head[1:])
		if n < 4 {
			return fmt.Errorf("message %q: bad length %d", head[0], n)
		}
		if _, err := server.Write(head[:5]); err != nil {
			return err
		}
		if _, err := io.CopyN(server, client, int64(n-4)); err != nil {
			return err
		}
	}
}
