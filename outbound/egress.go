package outbound

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
)

// RefusedReason says why the egress policy refused a destination: the reason label of
// rendezvous_outbound_refused_total.
type RefusedReason string

const (
	// RefusedMetadata: a cloud provider's instance metadata or host service address.
	// Always refused.
	RefusedMetadata RefusedReason = "metadata"
	// RefusedLinkLocal: 169.254.0.0/16 or fe80::/10. Always refused.
	RefusedLinkLocal RefusedReason = "link_local"
	// RefusedReserved: multicast, broadcast and the reserved 240.0.0.0/4. Always refused.
	RefusedReserved RefusedReason = "reserved"
	// RefusedLoopback: 127.0.0.0/8 or ::1, unless allowed.
	RefusedLoopback RefusedReason = "loopback"
	// RefusedPrivate: RFC 1918, shared address space (100.64.0.0/10) and unique local
	// IPv6 (fc00::/7), unless allowed.
	RefusedPrivate RefusedReason = "private"
	// RefusedUnspecified: 0.0.0.0 or ::, which a dial turns into this host, unless allowed.
	RefusedUnspecified RefusedReason = "unspecified"
	// RefusedSelf: an address this replica listens on, unless allowed with its port.
	RefusedSelf RefusedReason = "self"
)

// metadataAddrs are the instance metadata and host services of the usual clouds that sit
// outside link-local space (169.254.169.254 itself is link-local): AWS's IPv6 endpoint,
// Alibaba Cloud's, and Azure's wire server.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("168.63.129.16"),
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("169.254.170.2"), // ECS task metadata
}

var (
	sharedSpace = netip.MustParsePrefix("100.64.0.0/10")
	reserved4   = netip.MustParsePrefix("240.0.0.0/4")
	// nat64 addresses reach the IPv4 address in their last 32 bits through a NAT64
	// gateway; they are judged as that address.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
)

// RefusedError is a destination the egress policy refused: the call is not made, and
// sending it again would be refused again.
type RefusedError struct {
	// Host is the host name the request named (an address when it named one).
	Host string
	// Addr is the address the connection would have gone to.
	Addr   netip.AddrPort
	Reason RefusedReason
}

func (e *RefusedError) Error() string {
	target := e.Addr.String()
	if e.Host != "" && e.Host != e.Addr.Addr().String() {
		target = e.Host + " (" + e.Addr.String() + ")"
	}
	switch e.Reason {
	case RefusedMetadata, RefusedLinkLocal, RefusedReserved:
		return fmt.Sprintf("outbound call refused: %s is %s, which is never allowed", target, describeReason(e.Reason))
	case RefusedSelf:
		return fmt.Sprintf("outbound call refused: %s is this replica's own listener (--outbound-allow %s allows it)", target, e.Addr)
	}
	return fmt.Sprintf("outbound call refused: %s is %s (--outbound-allow allows it)", target, describeReason(e.Reason))
}

func describeReason(r RefusedReason) string {
	switch r {
	case RefusedMetadata:
		return "a cloud metadata address"
	case RefusedLinkLocal:
		return "link-local"
	case RefusedReserved:
		return "multicast, broadcast or reserved"
	case RefusedLoopback:
		return "loopback"
	case RefusedPrivate:
		return "a private address"
	case RefusedUnspecified:
		return "the unspecified address"
	}
	return string(r)
}

// Policy decides which addresses outbound connections may reach. It is checked as each
// connection is made, on the address DNS answered, so a name that resolves (or is made
// to resolve, rebinding) to a forbidden address is refused like the address itself.
type Policy struct {
	allowNets  []netip.Prefix
	allowPorts []netip.AddrPort
	allowHosts []string // lower case; "*.example.com" covers the subdomains of example.com
	allowNamed []hostPort
	self       []netip.AddrPort
	// local is every address of this host's interfaces: a listener on the unspecified
	// address is reached through any of them.
	local []netip.Addr
}

type hostPort struct {
	host string
	port uint16
}

// NewPolicy parses allow entries (--outbound-allow) and the replica's own listener
// addresses (host:port, as net.Listener.Addr prints them).
//
// An allow entry is a CIDR ("10.0.0.0/8"), an address ("10.1.2.3", "::1"), an address
// with a port ("127.0.0.1:9090", "[::1]:9090"), a host name ("billing.internal"), a
// host name with a port, or "*." and a domain for every name below it. An entry without
// a port allows the addresses it covers on any port, but not this replica's own
// listeners: those are allowed only by an entry that names their port.
func NewPolicy(allow, self []string) (*Policy, error) {
	p := &Policy{}
	for _, e := range allow {
		if err := p.addAllow(e); err != nil {
			return nil, err
		}
	}
	for _, s := range self {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, fmt.Errorf("own listener %q: %w", s, err)
		}
		p.self = append(p.self, unmapPort(ap))
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					p.local = append(p.local, ip.Unmap())
				}
			}
		}
	}
	return p, nil
}

// ParseAllow checks one allow entry as NewPolicy reads it.
func ParseAllow(entry string) error {
	return (&Policy{}).addAllow(entry)
}

func (p *Policy) addAllow(raw string) error {
	e := strings.TrimSpace(raw)
	bad := func(why string) error {
		return fmt.Errorf("outbound allow %q: %s (a CIDR, an address, a host name, each with an optional :port, or *.domain)", raw, why)
	}
	if e == "" {
		return bad("empty")
	}
	if strings.Contains(e, "/") {
		pfx, err := netip.ParsePrefix(e)
		if err != nil {
			return bad(err.Error())
		}
		if pfx.Addr().Zone() != "" {
			return bad("zones are not allowed")
		}
		p.allowNets = append(p.allowNets, unmapPrefix(pfx.Masked()))
		return nil
	}
	if a, err := netip.ParseAddr(e); err == nil {
		if a.Zone() != "" {
			return bad("zones are not allowed")
		}
		a = a.Unmap()
		p.allowNets = append(p.allowNets, netip.PrefixFrom(a, a.BitLen()))
		return nil
	}
	if ap, err := netip.ParseAddrPort(e); err == nil {
		if ap.Addr().Zone() != "" || ap.Port() == 0 {
			return bad("an address with a port needs a port from 1 to 65535 and no zone")
		}
		p.allowPorts = append(p.allowPorts, unmapPort(ap))
		return nil
	}
	host, port := e, uint16(0)
	if h, ps, err := net.SplitHostPort(e); err == nil {
		n, err := strconv.ParseUint(ps, 10, 16)
		if err != nil || n == 0 {
			return bad("the port must be a number from 1 to 65535")
		}
		host, port = h, uint16(n)
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if !validHostPattern(host) {
		return bad("not a host name")
	}
	if port != 0 {
		p.allowNamed = append(p.allowNamed, hostPort{host: host, port: port})
	} else {
		p.allowHosts = append(p.allowHosts, host)
	}
	return nil
}

// validHostPattern accepts a DNS name (labels of letters, digits, '-' and '_', no label
// empty or longer than 63) optionally starting with "*.".
func validHostPattern(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	// A name of digits and dots only would be read as an address by some resolvers.
	return strings.Trim(h, "0123456789.") != ""
}

func unmapPort(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
}

func unmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.Addr().Is4In6() {
		return p
	}
	bits := p.Bits() - 96
	if bits < 0 {
		bits = 0
	}
	return netip.PrefixFrom(p.Addr().Unmap(), bits).Masked()
}

// Check decides a connection to addr for a request that named host (a name or an
// address); nil allows it.
func (p *Policy) Check(host string, addr netip.AddrPort) *RefusedError {
	addr = unmapPort(addr)
	a := addr.Addr()
	if nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	refuse := func(r RefusedReason) *RefusedError { return &RefusedError{Host: host, Addr: addr, Reason: r} }
	// Never allowed, whatever the allow list says.
	for _, m := range metadataAddrs {
		if a == m {
			return refuse(RefusedMetadata)
		}
	}
	if a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() {
		return refuse(RefusedLinkLocal)
	}
	if a.IsMulticast() || a.IsInterfaceLocalMulticast() || reserved4.Contains(a) || !a.IsValid() {
		return refuse(RefusedReserved)
	}
	if p.namesPort(host, addr) {
		return nil
	}
	if p.isSelf(addr) {
		return refuse(RefusedSelf)
	}
	var reason RefusedReason
	switch {
	case a.IsLoopback():
		reason = RefusedLoopback
	case a.IsUnspecified():
		reason = RefusedUnspecified
	case a.IsPrivate() || sharedSpace.Contains(a):
		reason = RefusedPrivate
	default:
		return nil
	}
	if p.allows(host, a) {
		return nil
	}
	return refuse(reason)
}

// namesPort reports whether an allow entry names addr's port: an address with a port,
// or the request's host name with a port.
func (p *Policy) namesPort(host string, addr netip.AddrPort) bool {
	for _, ap := range p.allowPorts {
		if ap == addr {
			return true
		}
	}
	for _, hp := range p.allowNamed {
		if hp.port == addr.Port() && hostMatches(hp.host, host) {
			return true
		}
	}
	return false
}

func (p *Policy) allows(host string, a netip.Addr) bool {
	for _, n := range p.allowNets {
		if n.Contains(a) {
			return true
		}
	}
	for _, h := range p.allowHosts {
		if hostMatches(h, host) {
			return true
		}
	}
	return false
}

func hostMatches(pattern, host string) bool {
	if host == "" {
		return false
	}
	if d, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(host, "."+d)
	}
	return pattern == host
}

// isSelf reports whether addr reaches one of this replica's listeners; one on the
// unspecified address listens on every address of the host.
func (p *Policy) isSelf(addr netip.AddrPort) bool {
	for _, s := range p.self {
		if s.Port() != addr.Port() {
			continue
		}
		if s.Addr() == addr.Addr() {
			return true
		}
		if s.Addr().IsUnspecified() {
			a := addr.Addr()
			if a.IsLoopback() || a.IsUnspecified() {
				return true
			}
			for _, l := range p.local {
				if l == a {
					return true
				}
			}
		}
	}
	return false
}

// hostKey carries the host a request named to the dialer's control hook, which sees
// only the address DNS answered.
type hostKey struct{}

// control is the dialer's ControlContext: the last step before connect, after DNS.
func (p *Policy) control(ctx context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("outbound call refused: cannot read the address %q: %w", address, err)
	}
	host, _ := ctx.Value(hostKey{}).(string)
	if r := p.Check(host, ap); r != nil {
		return r
	}
	return nil
}

// dialer returns a DialContext that refuses what the policy refuses, resolving names
// with resolver (nil: the system's).
func (p *Policy) dialer(resolver *net.Resolver) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Resolver: resolver, ControlContext: p.control}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		return d.DialContext(context.WithValue(ctx, hostKey{}, host), network, addr)
	}
}

// Refused returns the policy's refusal in err's chain, or nil.
func Refused(err error) *RefusedError {
	var r *RefusedError
	if errors.As(err, &r) {
		return r
	}
	return nil
}
