package main

import (
	"flag"

	"svc.dev/svc/httplimits"
)

// proxyFlags are the flags that say which address per-address limits count behind a
// reverse proxy (docs/design/threats.md, "Behind a proxy"): one owner for the log
// and the portal.
type proxyFlags struct {
	first   bool
	hops    int
	trusted string
	proxy   httplimits.Proxy // set by parse
}

func (p *proxyFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.first, "trust-proxy", false, httplimits.TrustProxyHelp)
	fs.IntVar(&p.hops, "trust-proxy-hops", 0, httplimits.ProxyHopsHelp)
	fs.StringVar(&p.trusted, "trusted-proxies", "", httplimits.TrustedProxyHelp)
}

// connShare is a server's per-address connection share: set, or behind a proxy (every
// connection comes from the proxy) all of maxConns, else httplimits' default.
func connShare(maxConns, set int, p httplimits.Proxy) int {
	switch {
	case set > 0:
		return set
	case p.First || p.Hops > 0 || len(p.Trusted) > 0:
		return maxConns
	}
	return 0
}

// parse checks the flags and keeps their Proxy.
func (p *proxyFlags) parse() error {
	pr, err := httplimits.ParseProxy(p.first, p.hops, p.trusted)
	if err != nil {
		return usagef("%s", err.Error())
	}
	p.proxy = pr
	return nil
}
