package httplimits_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/httplimits"
)

// dialFrom connects to addr from the loopback address from (127.0.0.x).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// One address holding half-sent requests on every connection it can open gets its
// share (MaxConns/16) and no more: another address is still served at once.
func TestOneAddressCannotStarveOthers(t *testing.T) {
	addr := serve(t, httplimits.Limits{MaxConns: 32})
	for i := 0; i < 40; i++ {
		c := dialFrom(t, "127.0.0.2", addr)
		c.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab"))
	}
	time.Sleep(100 * time.Millisecond) // let the server take what it takes
	c := dialFrom(t, "127.0.0.3", addr)
	c.SetDeadline(time.Now().Add(3 * time.Second))
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("another address, while 127.0.0.2 holds 40 half-sent requests (MaxConns 32): %v %v", resp, err)
	}
	// The flooding address's next connection is refused at once with a 503.
	c = dialFrom(t, "127.0.0.2", addr)
	c.SetDeadline(time.Now().Add(3 * time.Second))
	data, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(data), "HTTP/1.1 503") {
		t.Fatalf("a connection beyond the address's share: %q", data)
	}
}

// IPv6 addresses are counted by their /64; IPv4 (also mapped) by the address.
func TestAddrKey(t *testing.T) {
	for in, want := range map[string]string{
		"2001:db8:1:2:aaaa::1": "2001:db8:1:2::/64", "2001:db8:1:2:ffff::9": "2001:db8:1:2::/64",
		"192.0.2.7": "192.0.2.7", "::ffff:192.0.2.7": "192.0.2.7",
	} {
		if got := httplimits.AddrKey(netip.MustParseAddr(in)); got != want {
			t.Errorf("AddrKey(%s) = %s, want %s", in, got, want)
		}
	}
}

// A handler that refuses before reading the body (no credentials) is answered at
// once and the connection closed: the server does not wait for a body announced and
// never sent.
func TestRefusalBeforeBodyIsImmediate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := httplimits.Default()
	hs := l.Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		io.ReadAll(r.Body)
		w.Write([]byte("ok"))
	}))
	go hs.Serve(l.Listener(ln))
	t.Cleanup(func() { hs.Close() })
	c := dialFrom(t, "127.0.0.1", ln.Addr().String())
	c.SetDeadline(time.Now().Add(3 * time.Second))
	c.Write([]byte("POST /append HTTP/1.1\r\nHost: x\r\nContent-Length: 65000\r\n\r\n{\"leaf\":"))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within 3 s to a POST without credentials whose body never comes: %v", err)
	}
	if resp.StatusCode != 401 || !resp.Close {
		t.Fatalf("status %d, close %v: want 401 and Connection: close", resp.StatusCode, resp.Close)
	}
	io.Copy(io.Discard, resp.Body)
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the connection stays open after the refusal: %v", err)
	}
	// A request whose body is read keeps its connection alive.
	c = dialFrom(t, "127.0.0.1", ln.Addr().String())
	c.SetDeadline(time.Now().Add(3 * time.Second))
	c.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nAuthorization: x\r\nContent-Length: 2\r\n\r\n{}"))
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("a read body: %v %v (close %v)", resp, err, resp != nil && resp.Close)
	}
}
