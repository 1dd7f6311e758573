package httplimits_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/httplimits"
)

func serve(t *testing.T, l httplimits.Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := l.Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write([]byte("ok"))
	}))
	go hs.Serve(l.Listener(ln))
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// A client that stops sending its body, or its headers, is cut off; an idle
// keep-alive connection is closed; connections beyond MaxConns wait.
func TestLimitsOverRealConnections(t *testing.T) {
	addr := serve(t, httplimits.Limits{ReadHeader: 300 * time.Millisecond, Read: 500 * time.Millisecond, Idle: 300 * time.Millisecond, MaxConns: 2, MaxConnsPerAddr: 2})
	closedWithin := func(name string, c net.Conn, d time.Duration) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(d))
		start := time.Now()
		_, err := io.ReadAll(c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: the server kept the connection open for %v", name, time.Since(start))
		}
	}
	// Stalled body.
	c, _ := net.Dial("tcp", addr)
	c.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc"))
	closedWithin("stalled body", c, 3*time.Second)
	c.Close()
	// Stalled headers.
	c, _ = net.Dial("tcp", addr)
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n"))
	closedWithin("stalled headers", c, 3*time.Second)
	c.Close()
	// Idle keep-alive.
	c, _ = net.Dial("tcp", addr)
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a plain request: %v %v", resp, err)
	}
	closedWithin("idle keep-alive", c, 3*time.Second)
	c.Close()
	// Two connections held open: a third is not served until one closes.
	a, _ := net.Dial("tcp", addr)
	b, _ := net.Dial("tcp", addr)
	defer a.Close()
	defer b.Close()
	a.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n"))
	b.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n"))
	time.Sleep(50 * time.Millisecond) // let the server accept both
	third, _ := net.Dial("tcp", addr)
	defer third.Close()
	third.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	third.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	if n, _ := third.Read(make([]byte, 1)); n > 0 {
		t.Fatal("a third connection was served while two were open (MaxConns 2)")
	}
	a.Close()
	b.Close()
	third.SetReadDeadline(time.Now().Add(3 * time.Second))
	data, _ := io.ReadAll(third)
	if !strings.Contains(string(data), "200 OK") {
		t.Fatalf("the third connection, once the others closed: %q", data)
	}
}
