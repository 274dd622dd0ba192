package quota

import (
	"net/netip"
	"testing"
)

// FuzzResolve: whatever forwarding chain a caller sends, the source is the
// connection's peer unless that peer is a trusted proxy, and then an
// address from the chain, never other text from it.
func FuzzResolve(f *testing.F) {
	f.Add("10.0.0.7:443", "203.0.113.9, 10.0.0.8")
	f.Add("127.0.0.1:5000", "198.51.100.1")
	f.Add("[::1]:80", "junk, , 10.1.1.1:99")
	f.Add("not-an-address", "203.0.113.9")
	trusted := Peers{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	f.Fuzz(func(t *testing.T, hop, chain string) {
		got := trusted.resolve(hop, []string{chain})
		a, ok := parseHop(hop)
		if !ok {
			if got != hop {
				t.Fatalf("resolve(%q) = %q; an unparsable peer stands as itself", hop, got)
			}
			return
		}
		if untrusted := (Peers{}).resolve(hop, []string{chain}); untrusted != a.String() {
			t.Fatalf("with no trusted proxy, resolve(%q, %q) = %q, want the peer %q", hop, chain, untrusted, a)
		}
		if !trusted.trusted(a) && got != a.String() {
			t.Fatalf("an untrusted peer %q was replaced by %q from its own chain %q", hop, got, chain)
		}
		if _, err := netip.ParseAddr(got); err != nil {
			t.Fatalf("resolve(%q, %q) = %q, not an address", hop, chain, got)
		}
	})
}
