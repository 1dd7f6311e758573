package testkit

import (
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy the test can cut (every connection closed, new ones refused)
// or black-hole (every byte dropped, nothing closed) and heal: the network between a
// process and what it talks to.
type Proxy struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	hole  bool // SetBlackhole
	conns map[net.Conn]bool
	held  []net.Conn // accepted while black-holed, never answered
}

// StartProxy serves target through a Proxy on a free local port; it closes with the
// test.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.SetCut(true) })
	return p
}

// Addr is where the proxy listens.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut, hole := p.cut, p.hole
		if hole && !cut {
			p.held = append(p.held, c) // a SYN into the void: the dialer times out
		}
		p.mu.Unlock()
		switch {
		case cut:
			c.Close()
		case !hole:
			go p.pipe(c)
		}
	}
}

func (p *Proxy) pipe(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.copy(up, c); done <- struct{}{} }()
	go func() { p.copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// copy forwards src to dst, dropping what arrives while the proxy is black-holed.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hole := p.hole
			p.mu.Unlock()
			if !hole {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// SetBlackhole drops (true) every byte in both directions without closing anything,
// as a cut cable or a partition does: each end finds out only by its own timeouts,
// and new connections are accepted but never answered. Healing (false) closes the
// connections that lived through it (their streams lost bytes, as TCP connections
// that timed out would be closed) and lets new ones through.
func (p *Proxy) SetBlackhole(hole bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = hole
	if !hole {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
		for _, c := range p.held {
			c.Close()
		}
		p.held = nil
	}
}

// SetCut cuts (true) or heals (false) the link.
func (p *Proxy) SetCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}
