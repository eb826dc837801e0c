package outbound

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	p, err := NewPolicy([]string{"10.1.0.0/16", "192.168.7.7", "127.0.0.1:9090", "billing.internal", "*.svc.cluster.local", "ops.example:8443"},
		[]string{"127.0.0.1:8080", "[::]:9000"})
	require.NoError(t, err)
	tests := []struct {
		host, addr string
		want       RefusedReason // "" allows
	}{
		{"example.com", "93.184.216.34:443", ""},
		{"", "[2606:2800:220:1::]:443", ""},
		{"", "169.254.169.254:80", RefusedMetadata},
		{"metadata.google.internal", "169.254.169.254:80", RefusedMetadata},
		{"", "[fd00:ec2::254]:80", RefusedMetadata},
		{"", "100.100.100.200:80", RefusedMetadata},
		{"", "[::ffff:169.254.169.254]:80", RefusedMetadata},
		{"", "[64:ff9b::a9fe:a9fe]:80", RefusedMetadata},
		{"billing.internal", "169.254.10.1:80", RefusedLinkLocal}, // allowed names do not open link-local
		{"", "[fe80::1]:80", RefusedLinkLocal},
		{"", "239.1.1.1:80", RefusedReserved},
		{"", "255.255.255.255:80", RefusedReserved},
		{"", "127.0.0.1:5432", RefusedLoopback},
		{"", "127.0.0.2:9090", RefusedLoopback},
		{"", "[::1]:80", RefusedLoopback},
		{"", "[::ffff:127.0.0.1]:5432", RefusedLoopback},
		{"", "0.0.0.0:80", RefusedUnspecified},
		{"", "[::]:80", RefusedUnspecified},
		{"", "10.2.0.1:80", RefusedPrivate},
		{"", "172.16.0.1:80", RefusedPrivate},
		{"", "192.168.1.1:80", RefusedPrivate},
		{"", "100.64.0.1:80", RefusedPrivate},
		{"", "[fd12::1]:80", RefusedPrivate},
		{"", "127.0.0.1:8080", RefusedSelf},
		{"", "127.0.0.1:9000", RefusedSelf}, // a listener on :: listens on loopback too
		{"", "[::1]:9000", RefusedSelf},
		// Allowed.
		{"", "10.1.200.3:80", ""},
		{"", "192.168.7.7:80", ""},
		{"", "127.0.0.1:9090", ""},
		{"billing.internal", "10.9.9.9:80", ""},
		{"BILLING.internal.", "10.9.9.9:80", ""},
		{"api.svc.cluster.local", "10.9.9.9:80", ""},
		{"svc.cluster.local", "10.9.9.9:80", RefusedPrivate}, // *.domain covers what is below it only
		{"ops.example", "10.9.9.9:8443", ""},
		{"ops.example", "10.9.9.9:80", RefusedPrivate},
		{"ops.example", "127.0.0.1:8443", ""},
		// A CIDR entry does not open the replica's own listener; a name without a port neither.
		{"billing.internal", "127.0.0.1:8080", RefusedSelf},
	}
	for _, tc := range tests {
		r := p.Check(tc.host, netip.MustParseAddrPort(tc.addr))
		if tc.want == "" {
			require.Nil(t, r, "%s %s", tc.host, tc.addr)
			continue
		}
		require.NotNil(t, r, "%s %s", tc.host, tc.addr)
		require.Equal(t, tc.want, r.Reason, "%s %s", tc.host, tc.addr)
		require.Contains(t, r.Error(), "outbound call refused")
	}

	// A self entry with a port opens the listener.
	p2, err := NewPolicy([]string{"127.0.0.1:8080"}, []string{"127.0.0.1:8080"})
	require.NoError(t, err)
	require.Nil(t, p2.Check("", netip.MustParseAddrPort("127.0.0.1:8080")))
}

func TestParseAllowRejects(t *testing.T) {
	t.Parallel()
	for _, e := range []string{"", " ", "10.0.0.0/33", "1.2.3.4:0", "1.2.3.4:99999", "host:abc", "ex ample.com", "*.", "*", "a..b",
		"-a.com", "fe80::1%eth0", "1.2.3", "http://a.com", "a.com/path"} {
		require.Error(t, ParseAllow(e), "%q", e)
	}
	for _, e := range []string{"10.0.0.0/8", "::1", "[::1]:80", "fd00::/8", "a.com", "a.com:80", "*.a.com", "A-B.c_d.com"} {
		require.NoError(t, ParseAllow(e), "%q", e)
	}
}

// FuzzPolicy: parsing an allow entry never panics, and whatever the allow list says,
// link-local and metadata addresses stay refused, reached by any host name.
func FuzzPolicy(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "127.0.0.1:9090", "*.svc.local", "::ffff:169.254.0.0/112", "0.0.0.0/0", "::/0",
		"169.254.169.254", "[fe80::1]:80", "a.b:1", "*.*", "1.2.3.4/0"} {
		f.Add(s, "billing.internal", "169.254.169.254:80")
	}
	f.Add("0.0.0.0/0", "x", "[::ffff:a9fe:a9fe]:80")
	f.Add("::/0", "x", "[64:ff9b::a9fe:a9fe]:443")
	f.Fuzz(func(t *testing.T, entry, host, addr string) {
		p, err := NewPolicy(strings.Split(entry, ","), nil)
		if err != nil {
			require.Contains(t, err.Error(), "outbound allow")
			return
		}
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return
		}
		a := ap.Addr().Unmap()
		if nat64.Contains(a) {
			b := a.As16()
			a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		}
		r := p.Check(host, ap)
		if a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsMulticast() {
			require.NotNil(t, r, "%q allowed %s", entry, addr)
		}
		if r != nil {
			require.NotEmpty(t, r.Error())
		}
	})
}
