package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
)

// dialFrom connects to addr (host:port) from the loopback address from.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// refusedAtOnce posts to path on addr without credentials, announcing a 65,000-byte
// body and sending 8 bytes of it; the server must answer want within 3 s and close.
func refusedAtOnce(t *testing.T, addr, path, contentType string, want int) {
	t.Helper()
	c := dialFrom(t, "127.0.0.1", addr)
	c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: "+addr+"\r\nContent-Type: "+contentType+"\r\nContent-Length: 65000\r\n\r\n{\"leaf\":")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("POST %s without credentials, body never sent: no answer within 3 s: %v", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != want || !resp.Close {
		t.Fatalf("POST %s: %d (Connection: close %v), want %d and close", path, resp.StatusCode, resp.Close, want)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("POST %s: the connection stays open after the refusal (%v)", path, err)
	}
}

// postFrom posts body with a bearer token from the loopback address from.
func postFrom(t *testing.T, from, addr, path, token, body string) (int, string) {
	t.Helper()
	c := dialFrom(t, from, addr)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", path, addr, token, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("POST %s from %s: %v", path, from, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// get answers status and body of a GET from the loopback address from, within 3 s.
func getFrom(t *testing.T, from, addr, path string) (int, string) {
	t.Helper()
	c := dialFrom(t, from, addr)
	c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s from %s: no answer within 3 s: %v", path, from, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHostedLogUnderAttack runs svc log --db-env as a stranger would probe it: a weak
// admin token is refused at start; refusals before bodies are immediate on append,
// /add and the admin API; /metrics without a metrics token and the checkpoints
// host's directories tell nothing about tenants; one address holding its share of
// connections leaves /health and the public C2SP routes (a hash tile, the checkpoint)
// answering another at once.
func TestHostedLogUnderAttack(t *testing.T) {
	dir := t.TempDir()
	ns := testkit.ListeningBroker(t)
	_, ss := startTestSigner(t)
	t.Setenv("TEST_DATABASE_URL", pgtest.New(t))
	args := []string{"--db-env", "TEST_DATABASE_URL", "--nats-url", natsembed.URL(ns, "pw-of-tests"), "--data", filepath.Join(dir, "data"),
		"--signer-url", ss.URL, "--signer-token-env", "TEST_SIGNER_TOKEN", "--admin-token-env", "TEST_ADMIN_TOKEN",
		"--public-url", "https://log.example", "--checkpoints-port", "0", "--checkpoint-every", "1", "--max-conns", "64"}

	t.Setenv("TEST_ADMIN_TOKEN", "admin")
	if code, _, stderr := runSvc(t, append([]string{"log", "--port", "0"}, args...)...); code == 0 || !strings.Contains(stderr, "at least 32") || !strings.Contains(stderr, "TEST_ADMIN_TOKEN") {
		t.Fatalf("a 5-character admin token: exit %d, stderr %s", code, stderr)
	}
	const adminToken = "admin-token-0123456789abcdefghijklmnop"
	t.Setenv("TEST_ADMIN_TOKEN", adminToken)
	base, cpAddr, _ := startLogCmdCP(t, args...)
	addr := strings.TrimPrefix(base, "http://")
	// Before any tenant starts, /health has the signer sign a head (of the empty
	// tree, naming a log no tenant can have: the signer signs only named heads).
	if s, body := getFrom(t, "127.0.0.1", addr, "/health"); s != 200 {
		t.Fatalf("/health before any tenant: %d %s", s, body)
	}
	if s, b := httpDo(t, "POST", base+"/admin/tenants", adminToken, `{"id":"acme-secret-tenant"}`); s != http.StatusUnsupportedMediaType {
		t.Fatalf("an admin write without a JSON content type: %d %s", s, b)
	}
	code, b := adminPost(t, base+"/admin/tenants", adminToken, `{"id":"acme-secret-tenant"}`)
	if code != http.StatusCreated {
		t.Fatalf("add tenant: %d %s", code, b)
	}
	code, b = adminPost(t, base+"/admin/tenants/acme-secret-tenant/tokens", adminToken, `{"label":"ci"}`)
	if code != http.StatusCreated {
		t.Fatalf("add token: %d %s", code, b)
	}
	token := b[strings.Index(b, `"token":"`)+9:][:64]
	s, b := httpDo(t, "POST", base+"/t/acme-secret-tenant/append", token, `{"leaf":"hello"}`)
	if s != 200 {
		t.Fatalf("append: %d %s", s, b)
	}
	// A tenant made without a log id: its heads name its default log id, under
	// which the signer keeps its last head (a head naming no log is refused).
	var proof receipt.Proof
	if err := json.Unmarshal([]byte(b), &proof); err != nil {
		t.Fatal(err)
	}
	if th, err := receipt.DecodeTreeHead(proof.TreeHead); err != nil || th.Log != receipt.DefaultLogID("acme-secret-tenant") {
		t.Fatalf("the head of a tenant without a log id: %+v %v, want it to name %s", th, err, receipt.DefaultLogID("acme-secret-tenant"))
	}

	// Credentials before bodies: answered and closed at once.
	refusedAtOnce(t, addr, "/t/acme-secret-tenant/append", "application/json", http.StatusUnauthorized)
	refusedAtOnce(t, addr, "/t/acme-secret-tenant/add", "application/octet-stream", http.StatusUnauthorized)
	refusedAtOnce(t, addr, "/admin/tenants", "application/json", http.StatusUnauthorized)

	// /metrics: refused without the metrics token, naming no tenant.
	if s, body := getFrom(t, "127.0.0.1", addr, "/metrics"); s != http.StatusForbidden || strings.Contains(body, "acme-secret-tenant") || !strings.Contains(body, "--metrics-token-env") {
		t.Fatalf("/metrics of a hosted log without --metrics-token-env: %d %s", s, body)
	}
	// The checkpoints host: files, no directory listings.
	testkit.Eventually(t, 15*time.Second, func() error {
		if s, _ := getFrom(t, "127.0.0.1", cpAddr, "/acme-secret-tenant/latest.json"); s != 200 {
			return errStatus(s)
		}
		return nil
	})
	for _, p := range []string{"/", "/acme-secret-tenant/", "/acme-secret-tenant", "/default/"} {
		if s, body := getFrom(t, "127.0.0.1", cpAddr, p); s != http.StatusNotFound || strings.Contains(body, "acme") {
			t.Fatalf("checkpoints host GET %s: %d %s", p, s, body)
		}
	}

	// A flood of wrong tenant tokens costs few broker round trips (old: two each),
	// while a token created a moment ago by another process (log-admin) appends at
	// once from an address that is not flooding.
	in0, _ := ns.Varz(nil)
	for range 200 {
		if s, _ := httpDo(t, "POST", base+"/t/acme-secret-tenant/append", strings.Repeat("e", 64), `{"leaf":"x"}`); s != http.StatusUnauthorized {
			t.Fatalf("a wrong token: %d", s)
		}
	}
	in1, _ := ns.Varz(nil)
	t.Logf("200 wrong tokens: %d messages into the broker", in1.InMsgs-in0.InMsgs)
	if d := in1.InMsgs - in0.InMsgs; d > 100 {
		t.Fatalf("200 wrong tokens cost %d messages into the broker; want few (the view's token hashes answer)", d)
	}
	fresh := strings.TrimSpace(mustRun(t, "log-admin", "--db-env", "TEST_DATABASE_URL", "--nats-url", natsembed.URL(ns, "pw-of-tests"), "token", "add", "acme-secret-tenant", "--label", "fresh"))
	if s, b := postFrom(t, "127.0.0.4", addr, "/t/acme-secret-tenant/append", fresh, `{"leaf":"fresh"}`); s != 200 {
		t.Fatalf("a token created a moment ago by log-admin: %d %s", s, b)
	}

	// One address (127.0.0.2) holding every connection it can open with half-sent
	// requests (--max-conns 64: a share of 4) leaves /health answering 127.0.0.3.
	for range 70 {
		c := dialFrom(t, "127.0.0.2", addr)
		io.WriteString(c, "POST /t/acme-secret-tenant/append HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
	}
	time.Sleep(200 * time.Millisecond)
	if s, body := getFrom(t, "127.0.0.3", addr, "/health"); s != 200 {
		t.Fatalf("/health from another address while 127.0.0.2 floods: %d %s", s, body)
	}
	// The public C2SP routes too: a hash tile, and the checkpoint (404 until the
	// first is published, never 503).
	if s, body := getFrom(t, "127.0.0.3", addr, "/t/acme-secret-tenant/tile/0/000.p/1"); s != 200 || len(body) != 32 {
		t.Fatalf("a hash tile from another address while 127.0.0.2 floods: %d %q", s, body)
	}
	if s, body := getFrom(t, "127.0.0.3", addr, "/t/acme-secret-tenant/checkpoint"); s != 200 && s != 404 {
		t.Fatalf("the checkpoint from another address while 127.0.0.2 floods: %d %s", s, body)
	}
}

// adminPost posts a JSON body to an admin route with the admin token.
func adminPost(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, b := testkit.Send(t, req)
	return resp.StatusCode, b
}

type errStatus int

func (e errStatus) Error() string { return "status " + http.StatusText(int(e)) }
