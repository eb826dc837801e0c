package testkit

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"

	"golang.org/x/net/dns/dnsmessage"
)

// Resolver is a DNS resolver that answers from a table, as a hostile or rebinding DNS
// server would: each name in answers resolves to its address (A or AAAA by its family),
// any other name to nothing. It speaks DNS over an in-memory connection, so Go's own
// resolver code (the one a net.Dialer uses) parses every answer. Lookups counts the
// questions asked.
type Resolver struct {
	*net.Resolver
	Lookups atomic.Int64
}

// NewResolver returns a Resolver answering from answers (names without the final dot).
func NewResolver(answers map[string]netip.Addr) *Resolver {
	r := &Resolver{}
	r.Resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		go r.serve(server, answers)
		return client, nil
	}}
	return r
}

// serve answers the DNS-over-stream questions on one connection until it closes.
func (r *Resolver) serve(conn net.Conn, answers map[string]netip.Addr) {
	defer conn.Close()
	for {
		var size [2]byte
		if _, err := io.ReadFull(conn, size[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(conn, msg); err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(msg)
		if err != nil {
			return
		}
		q, err := p.Question()
		if err != nil {
			return
		}
		r.Lookups.Add(1)
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionAvailable: true})
		b.EnableCompression()
		_ = b.StartQuestions()
		_ = b.Question(q)
		_ = b.StartAnswers()
		addr, ok := answers[strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")]
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
		switch {
		case ok && q.Type == dnsmessage.TypeA && addr.Is4():
			_ = b.AResource(rh, dnsmessage.AResource{A: addr.As4()})
		case ok && q.Type == dnsmessage.TypeAAAA && addr.Is6():
			_ = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: addr.As16()})
		}
		out, err := b.Finish()
		if err != nil {
			return
		}
		binary.BigEndian.PutUint16(size[:], uint16(len(out)))
		if _, err := conn.Write(append(size[:], out...)); err != nil {
			return
		}
	}
}
