// Package httplimits holds the bounds every svc HTTP server applies to its clients:
// how long a client may take to send headers and body, how long a response may take
// to be written, how long an idle keep-alive connection stays open, how large the
// headers may be and how many connections are served at once. Bodies are capped by
// each server's handlers (with http.MaxBytesReader), after the credentials are checked.
package httplimits

import (
	"net"
	"net/http"
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
	return l
}

// Server makes an http.Server for h with these bounds (negative durations: none).
func (l Limits) Server(h http.Handler) *http.Server {
	l = l.withDefaults()
	pos := func(d time.Duration) time.Duration { return max(d, 0) }
	return &http.Server{Handler: h, ReadHeaderTimeout: l.ReadHeader, ReadTimeout: pos(l.Read),
		WriteTimeout: pos(l.Write), IdleTimeout: l.Idle, MaxHeaderBytes: l.MaxHeaderBytes}
}

// Listener caps the connections ln hands out at once at l.MaxConns.
func (l Limits) Listener(ln net.Listener) net.Listener {
	l = l.withDefaults()
	return &limitListener{Listener: ln, sem: make(chan struct{}, l.MaxConns)}
}

type limitListener struct {
	net.Listener
	sem chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
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

// ClientAddr is the address per-address limits count: the peer's, or with
// trustProxy the first X-Forwarded-For entry when it is an IP address (only behind a
// proxy that sets it: a client can forge the header).
func ClientAddr(r *http.Request, trustProxy bool) string {
	if trustProxy {
		if xff := r.Header.Get("X-Forwarded-For"); xff != "" {
			first := strings.TrimSpace(strings.Split(xff, ",")[0])
			if ip := net.ParseIP(first); ip != nil {
				return ip.String()
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
