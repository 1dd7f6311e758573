package httplimits

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Proxy says which address of a request the per-address limits (throttles) count.
// The zero Proxy counts the peer's address: right when clients connect directly, and
// behind a proxy it makes everyone there share one budget. Set at most one field.
type Proxy struct {
	// First takes the first X-Forwarded-For entry (SPEC.md's --trust-proxy). Right
	// only behind a proxy that replaces the header with the address of its peer; a
	// proxy that appends (the usual setting) keeps what the client sent first, so the
	// client chooses its own address.
	First bool
	// Hops takes the entry the last Hops proxies wrote: the Hops-th from the right (the
	// first when there are fewer). Right behind a fixed chain of Hops proxies that
	// append to the header, when clients cannot reach the server but through them.
	Hops int
	// Trusted are the proxies' addresses: from the peer leftwards through the header,
	// the first address not in Trusted is the client. Right whenever the proxies'
	// addresses are known; a client that reaches the server directly is its peer.
	Trusted []netip.Prefix
}

// ParseProxy reads the flag forms: first (--trust-proxy), hops (--trust-proxy-hops)
// and a comma-separated list of addresses or CIDR prefixes (--trusted-proxies).
func ParseProxy(first bool, hops int, trusted string) (Proxy, error) {
	p := Proxy{First: first, Hops: hops}
	for _, s := range strings.Split(trusted, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		pr, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return Proxy{}, fmt.Errorf("trusted proxy %q: want an IP address or a CIDR prefix like 10.0.0.0/8", s)
			}
			pr = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		p.Trusted = append(p.Trusted, pr.Masked())
	}
	set := 0
	for _, on := range []bool{p.First, p.Hops != 0, len(p.Trusted) > 0} {
		if on {
			set++
		}
	}
	switch {
	case hops < 0 || hops > 16:
		return Proxy{}, fmt.Errorf("trusted proxy hops %d: want 1 to 16", hops)
	case set > 1:
		return Proxy{}, errors.New("choose one of --trust-proxy, --trust-proxy-hops and --trusted-proxies")
	}
	return p, nil
}

// ProxyFlagsHelp is the --help text of the three proxy flags, for every server that
// has them.
const (
	TrustProxyHelp   = "per-address limits use the FIRST X-Forwarded-For entry: only behind a proxy that REPLACES the header (one that appends lets clients pick their address; use --trust-proxy-hops or --trusted-proxies)"
	ProxyHopsHelp    = "per-address limits use the X-Forwarded-For entry written by the last `N` proxies (the N-th from the right): behind a fixed chain of N appending proxies that clients cannot bypass"
	TrustedProxyHelp = "comma-separated `addresses` or CIDR prefixes of the proxies in front: per-address limits use the first X-Forwarded-For entry, from the right, not among them (the safest form when the proxies' addresses are known)"
)

// ClientAddr is the address per-address limits count for r under p.
func ClientAddr(r *http.Request, p Proxy) string {
	peer := peerAddr(r.RemoteAddr)
	if !p.First && p.Hops == 0 && len(p.Trusted) == 0 {
		return peer
	}
	var entries []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		for _, e := range strings.Split(v, ",") {
			entries = append(entries, strings.TrimSpace(e))
		}
	}
	pick := func(e string) (string, bool) {
		a, err := netip.ParseAddr(e)
		if err != nil {
			return "", false
		}
		return a.Unmap().String(), true
	}
	switch {
	case len(entries) == 0:
		return peer
	case p.First:
		if a, ok := pick(entries[0]); ok {
			return a
		}
	case p.Hops > 0:
		if a, ok := pick(entries[max(0, len(entries)-p.Hops)]); ok {
			return a
		}
	default:
		return p.walk(peer, entries, pick)
	}
	return peer
}

// walk goes from the peer leftwards while the address is a trusted proxy's.
func (p Proxy) walk(peer string, entries []string, pick func(string) (string, bool)) string {
	cur := peer
	for i := len(entries) - 1; i >= 0 && p.trusted(cur); i-- {
		a, ok := pick(entries[i])
		if !ok {
			return cur // a malformed entry: count the last proxy that wrote it
		}
		cur = a
	}
	return cur
}

func (p Proxy) trusted(addr string) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, pr := range p.Trusted {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

func peerAddr(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}
