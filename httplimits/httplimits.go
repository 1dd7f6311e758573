// Package httplimits holds the bounds every svc HTTP server applies to its clients:
// how long a client may take to send headers and body, how long a response may take
// to be written, how long an idle keep-alive connection stays open, how large the
// headers may be, how many connections are served at once and how many of them one
// client address may hold. Bodies are capped by each server's handlers (with
// http.MaxBytesReader), after the credentials are checked; a response written before
// the request's body was read closes the connection (the body is never waited for).
package httplimits

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Limits are one server's bounds. Zero fields take the defaults of Default.
type Limits struct {
	// ReadHeader: time to send the request line and headers. Default 10 s.
	ReadHeader time.Duration
	// Read: time to send the whole request, body included. Default 30 s; negative:
	// none at the server (a handler that streams sets its own per request).
	Read time.Duration
	// Write: time from the end of the request headers to the end of the response.
	// Default 2 min (a log append may take 10 s and is retried three times); negative:
	// none at the server (long-lived event streams set their own per request).
	Write time.Duration
	// Idle: time a keep-alive connection waits for its next request. Default 2 min.
	Idle time.Duration
	// MaxHeaderBytes caps the request headers. Default 128 KiB (a grant header is at
	// most 64 KiB).
	MaxHeaderBytes int
	// MaxConns caps the connections served at once; more wait in the kernel's
	// accept queue. Default 1024.
	MaxConns int
	// MaxConnsPerAddr caps the connections one client address holds at once (an
	// IPv4 address, or an IPv6 /64: one host's allocation); one more is answered 503
	// and closed at once. Default MaxConns/16 (64 of 1024), at least 1. Behind a
	// reverse proxy every client shares the proxy's address: raise it to MaxConns.
	MaxConnsPerAddr int
}

// Default is the bounds of every svc server unless it says otherwise.
func Default() Limits {
	return Limits{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 2 * time.Minute,
		Idle: 2 * time.Minute, MaxHeaderBytes: 128 << 10, MaxConns: 1024}
}

func (l Limits) withDefaults() Limits {
	d := Default()
	if l.ReadHeader == 0 {
		l.ReadHeader = d.ReadHeader
	}
	if l.Read == 0 {
		l.Read = d.Read
	}
	if l.Write == 0 {
		l.Write = d.Write
	}
	if l.Idle == 0 {
		l.Idle = d.Idle
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if l.MaxConns == 0 {
		l.MaxConns = d.MaxConns
	}
	if l.MaxConnsPerAddr <= 0 {
		l.MaxConnsPerAddr = max(1, l.MaxConns/16)
	}
	return l
}

// Server makes an http.Server for h with these bounds (negative durations: none).
func (l Limits) Server(h http.Handler) *http.Server {
	l = l.withDefaults()
	pos := func(d time.Duration) time.Duration { return max(d, 0) }
	return &http.Server{Handler: closeUnread(h), ReadHeaderTimeout: l.ReadHeader, ReadTimeout: pos(l.Read),
		WriteTimeout: pos(l.Write), IdleTimeout: l.Idle, MaxHeaderBytes: l.MaxHeaderBytes}
}

// Listener caps the connections ln hands out at once at l.MaxConns, and those of
// one client address (IPv6: its /64) at l.MaxConnsPerAddr: one address holding its
// share cannot starve the others, its next connection is answered 503 and closed.
func (l Limits) Listener(ln net.Listener) net.Listener {
	l = l.withDefaults()
	return &limitListener{Listener: ln, sem: make(chan struct{}, l.MaxConns), perAddr: l.MaxConnsPerAddr, held: map[string]int{}}
}

type limitListener struct {
	net.Listener
	sem     chan struct{}
	perAddr int
	mu      sync.Mutex
	held    map[string]int // connections open per address key
}

// overShare is the answer to a connection beyond its address's share.
const overShare = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 52\r\n\r\ntoo many connections from this address; retry later\n"

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		l.sem <- struct{}{}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.sem
			return nil, err
		}
		key := addrKey(c.RemoteAddr())
		if !l.take(key) {
			<-l.sem
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(c, overShare)
			_ = c.Close()
			continue
		}
		return &limitConn{Conn: c, release: func() { l.put(key); <-l.sem }}, nil
	}
}

// take counts one more connection of key, false when key holds its share.
func (l *limitListener) take(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[key] >= l.perAddr {
		return false
	}
	l.held[key]++
	return true
}

func (l *limitListener) put(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[key]--; l.held[key] <= 0 {
		delete(l.held, key)
	}
}

// addrKey is what a connection's share is counted by: its IPv4 address, or the /64
// of its IPv6 address; the whole address text otherwise.
func addrKey(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	return AddrKey(ap.Addr())
}

// AddrKey is the key per-address limits count ip by: an IPv4 address (also when
// IPv4-mapped) as itself, an IPv6 address by its /64 (one host's allocation).
func AddrKey(ip netip.Addr) string {
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.WithZone("").Prefix(64)
	return p.String()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// LoopbackHost reports whether host (with or without port, IPv6 in brackets or not)
// names the loopback interface: localhost, 127.0.0.0/8 or ::1.
func LoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
