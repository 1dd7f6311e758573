package gateway_test

// Tests of issue 17: a hostile agent or client probing the HTTP gateway. Every test
// runs the gateway's own server (Gateway.ServeHTTP, with its limits) and talks to it
// over real HTTP from the test goroutine, as an outside client would.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"svc.dev/svc/conformance"
	"svc.dev/svc/gateway"
	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// countingUpstream is a real MCP server (mcp-go over Streamable HTTP) that counts the
// calls that reach it: echo answers the size of its arguments, big answers 100 KB.
type countingUpstream struct {
	url   string
	calls atomic.Int64
}

func startCountingUpstream(t testing.TB) *countingUpstream {
	t.Helper()
	u := &countingUpstream{}
	srv := server.NewMCPServer("counting", "1")
	srv.AddTool(mcp.NewTool("echo"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		u.calls.Add(1)
		return mcp.NewToolResultText(fmt.Sprintf("args of %d bytes", len(req.Params.RawArguments))), nil
	})
	srv.AddTool(mcp.NewTool("big"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		u.calls.Add(1)
		return mcp.NewToolResultText(strings.Repeat("x", 100<<10)), nil
	})
	ts := httptest.NewServer(server.NewStreamableHTTPServer(srv))
	t.Cleanup(ts.Close)
	u.url = ts.URL + "/mcp"
	return u
}

// hostileGateway is a gateway in front of a countingUpstream, served by
// Gateway.ServeHTTP on a free port, with a clock the test can move.
type hostileGateway struct {
	f   *fixture
	g   *gateway.Gateway
	up  *countingUpstream
	url string // .../mcp
	now atomic.Int64
}

func startHostileGateway(t testing.TB, httpCfg gateway.HTTPConfig, mutate func(map[string]any)) *hostileGateway {
	t.Helper()
	h := &hostileGateway{up: startCountingUpstream(t)}
	h.now.Store(time.Now().UnixNano())
	h.f = newFixture(t, func(cfg map[string]any) {
		cfg["upstream"] = map[string]any{"url": h.up.url}
		delete(cfg, "facts")
		delete(cfg, "precommit")
		delete(cfg, "grantFile")
		if mutate != nil {
			mutate(cfg)
		}
	})
	os.WriteFile(filepath.Join(h.f.dir, "policy.cedar"), []byte(`@id("all") permit (principal, action, resource);`), 0o644)
	cfg, err := gateway.LoadConfig(h.f.config)
	if err != nil {
		t.Fatal(err)
	}
	h.g, err = gateway.New(context.Background(), cfg, gateway.Options{LoadPolicy: gateway.CedarPolicy,
		Now: func() time.Time { return time.Unix(0, h.now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	httpCfg.Host = "127.0.0.1"
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- h.g.ServeHTTP(ctx, httpCfg, func(a string) { addr <- a }) }()
	t.Cleanup(func() { cancel(); <-done; h.g.Close() })
	select {
	case a := <-addr:
		h.url = "http://" + a + "/mcp"
	case err := <-done:
		t.Fatal(err)
	}
	return h
}

func (h *hostileGateway) grant(t testing.TB, agent string, ttl time.Duration) string {
	t.Helper()
	env, err := receipt.SignJSON(receipt.PayloadDelegation, receipt.NewGrant("alice", agent, []string{"echo", "big"}, time.Unix(0, h.now.Load()).Add(-time.Minute), ttl, nil, nil), h.f.alice)
	if err != nil {
		t.Fatal(err)
	}
	return grantHeader(env)
}

// mcpReq is one Streamable HTTP request; url is the gateway's /mcp unless set, proof
// goes in X-Svc-Proof when set.
type mcpReq struct {
	method, session, grant, contentType, proof, url string
	body                                            io.Reader
}

func (h *hostileGateway) do(t *testing.T, q mcpReq) (*http.Response, string) {
	t.Helper()
	if q.url == "" {
		q.url = h.url
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, q.method, q.url, q.body)
	if err != nil {
		t.Fatal(err)
	}
	if q.contentType == "" {
		q.contentType = "application/json"
	}
	req.Header.Set("Content-Type", q.contentType)
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if q.session != "" {
		req.Header.Set("Mcp-Session-Id", q.session)
	}
	if q.grant != "" {
		req.Header.Set("X-Svc-Grant", q.grant)
	}
	if q.proof != "" {
		req.Header.Set(gateway.HeaderProof, q.proof)
	}
	return testkit.Send(t, req)
}

// initialize opens a session under grant and returns its id.
func (h *hostileGateway) initialize(t *testing.T, grant string) string {
	t.Helper()
	resp, body := h.do(t, mcpReq{method: "POST", grant: grant, body: strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)})
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	h.do(t, mcpReq{method: "POST", session: id, grant: grant, body: strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)})
	return id
}

// callRaw sends tools/call with raw argument bytes and returns status and the
// CallToolResult (from a JSON or an SSE answer).
func (h *hostileGateway) callRaw(t *testing.T, session, grant, tool string, rawArgs []byte) (int, *callResult, string) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"` + tool + `","arguments":`)
	b.Write(rawArgs)
	b.WriteString(`}}`)
	resp, body := h.do(t, mcpReq{method: "POST", session: session, grant: grant, body: &b})
	if resp.StatusCode != 200 {
		return resp.StatusCode, nil, body
	}
	data := body
	if i := strings.Index(body, "data: "); i >= 0 {
		data = strings.TrimSpace(strings.SplitN(body[i+6:], "\n", 2)[0])
	}
	var rpc struct {
		Result *callResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(data), &rpc); err != nil || rpc.Result == nil {
		t.Fatalf("tools/call answer: %s", body)
	}
	return resp.StatusCode, rpc.Result, body
}

func receiptOf(t *testing.T, r *callResult) string {
	t.Helper()
	id, _ := r.Meta["svc/receipt"].(string)
	if id == "" {
		t.Fatalf("no receipt on %+v", r)
	}
	return id
}

// Row 1: a body sent on a session is capped before it is read (413), however large.
func TestHostileSessionBodyCapped(t *testing.T) {
	h := startHostileGateway(t, gateway.HTTPConfig{}, nil)
	grant := h.grant(t, "agent-a", time.Hour)
	id := h.initialize(t, grant)
	resp, body := h.do(t, mcpReq{method: "POST", session: id, grant: grant, body: bytes.NewReader(bytes.Repeat([]byte(" "), 5<<20))})
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("5 MiB body on a session: %d %s, want 413", resp.StatusCode, body)
	}
	// A 256 MiB body that never existed in memory: the gateway stops reading it.
	var sent atomic.Int64
	huge := &countingReader{n: 256 << 20, sent: &sent}
	req, _ := http.NewRequest("POST", h.url, huge)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("X-Svc-Grant", grant)
	if resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("256 MiB body: %d, want 413", resp.StatusCode)
		}
	} // else: the gateway closed the connection while the client was still sending
	if n := sent.Load(); n > 32<<20 {
		t.Fatalf("the gateway read %d bytes of an oversized body", n)
	}
	// The session still works.
	if code, r, body := h.callRaw(t, id, grant, "echo", []byte(`{"m":"after"}`)); code != 200 || r.IsError {
		t.Fatalf("call after the oversized bodies: %d %s", code, body)
	}
}

type countingReader struct {
	n    int64
	sent *atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	left := r.n - r.sent.Load()
	if left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	for i := range p {
		p[i] = ' '
	}
	r.sent.Add(int64(len(p)))
	return len(p), nil
}

// Row 2: a grant that expires while its session is open stops working at once: the
// call is refused with 403 and never reaches the upstream; no receipt is issued.
func TestHostileGrantExpiresDuringSession(t *testing.T) {
	h := startHostileGateway(t, gateway.HTTPConfig{}, nil)
	grant := h.grant(t, "agent-a", time.Hour)
	id := h.initialize(t, grant)
	code, r, body := h.callRaw(t, id, grant, "echo", []byte(`{"m":"before"}`))
	if code != 200 || r.IsError {
		t.Fatalf("call inside the window: %d %s", code, body)
	}
	receiptOf(t, r)
	if err := h.g.Flush(); err != nil {
		t.Fatal(err)
	}
	files := countReceipts(t, h.f)
	h.now.Add(int64(time.Hour + time.Second)) // one second past expiresAt
	code, _, body = h.callRaw(t, id, grant, "echo", []byte(`{"m":"after"}`))
	if code != http.StatusForbidden || !strings.Contains(body, "grant rejected") || !strings.Contains(body, "expired") {
		t.Fatalf("call after expiry: %d %s, want 403 naming the expiry", code, body)
	}
	if n := h.up.calls.Load(); n != 1 || gateway.FastCalls(h.g) != 1 {
		t.Fatalf("the upstream was reached %d times, want 1 (the fast path answered %d)", n, gateway.FastCalls(h.g))
	}
	h.g.Flush()
	if n := countReceipts(t, h.f); n != files {
		t.Fatalf("%d receipt files after the refused call, want %d", n, files)
	}
}

// Row 3: GET /mcp without a grant (with or without a session) is refused with 403;
// no event stream opens.
func TestHostileGetWithoutGrant(t *testing.T) {
	h := startHostileGateway(t, gateway.HTTPConfig{}, nil)
	resp, body := h.do(t, mcpReq{method: "GET"})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "grant rejected") || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET /mcp without grant or session: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	grant := h.grant(t, "agent-a", time.Hour)
	id := h.initialize(t, grant)
	if resp, body := h.do(t, mcpReq{method: "GET", session: id}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET /mcp with a session id and no grant: %d %s", resp.StatusCode, body)
	}
	if resp, body := h.do(t, mcpReq{method: "DELETE"}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("DELETE /mcp without a grant: %d %s", resp.StatusCode, body)
	}
}

// Row 4: a grantless POST is refused before its body is read (the client gets 403
// while its body is still unsent), and a granted client that stalls mid-body is cut
// off by the body read deadline.
func TestHostileGrantCheckedBeforeBody(t *testing.T) {
	h := startHostileGateway(t, gateway.HTTPConfig{BodyReadTimeout: 500 * time.Millisecond}, nil)
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize",`)) // then nothing more
	req, _ := http.NewRequest("POST", h.url, pr)
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = 4 << 20
	start := time.Now()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("grantless POST with an unfinished body: %v (the gateway waited for the body)", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || time.Since(start) > 5*time.Second {
		t.Fatalf("grantless POST: %d after %v, want 403 at once", resp.StatusCode, time.Since(start))
	}
	// With a grant, a body that stalls is cut off by the read deadline.
	grant := h.grant(t, "agent-a", time.Hour)
	pr2, pw2 := io.Pipe()
	defer pw2.Close()
	go pw2.Write([]byte(`{"jsonrpc":"2.0",`))
	req, _ = http.NewRequest("POST", h.url, pr2)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Svc-Grant", grant)
	req.ContentLength = 1 << 20
	start = time.Now()
	resp, err = (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("stalled body: %d, want 400 or a closed connection", resp.StatusCode)
		}
	} else if time.Since(start) >= 10*time.Second {
		t.Fatalf("stalled body: the gateway kept waiting: %v", err)
	}
}

// Row 5: a session id is not a credential: a request naming session A must present
// A's grant; B's grant (or none) is refused with 403 and does not act on A.
func TestHostileSessionNeedsItsOwnGrant(t *testing.T) {
	h := startHostileGateway(t, gateway.HTTPConfig{}, nil)
	grantA := h.grant(t, "agent-a", time.Hour)
	grantB := h.grant(t, "agent-b", time.Hour)
	idA := h.initialize(t, grantA)
	h.initialize(t, grantB)
	if code, _, body := h.callRaw(t, idA, grantB, "echo", []byte(`{}`)); code != http.StatusForbidden || !strings.Contains(body, "another grant") {
		t.Fatalf("call on A's session with B's grant: %d %s", code, body)
	}
	if code, _, body := h.callRaw(t, idA, "", "echo", []byte(`{}`)); code != http.StatusForbidden {
		t.Fatalf("call on A's session without a grant: %d %s", code, body)
	}
	stranger, _ := signer.GenerateKey()
	strangers, _ := receipt.SignJSON(receipt.PayloadDelegation, receipt.NewGrant("alice", "agent-a", []string{"echo"}, time.Unix(0, h.now.Load()).Add(-time.Minute), time.Hour, nil, nil), stranger)
	if code, _, body := h.callRaw(t, idA, grantHeader(strangers), "echo", []byte(`{}`)); code != http.StatusForbidden || !strings.Contains(body, "grant rejected") {
		t.Fatalf("call on A's session with a grant from an untrusted key: %d %s", code, body)
	}
	if resp, body := h.do(t, mcpReq{method: "DELETE", session: idA, grant: grantB}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("DELETE of A's session with B's grant: %d %s", resp.StatusCode, body)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("the upstream was reached %d times", n)
	}
	code, r, body := h.callRaw(t, idA, grantA, "echo", []byte(`{}`))
	if code != 200 || r.IsError {
		t.Fatalf("A's session with A's grant, after the attempts: %d %s", code, body)
	}
	h.g.Flush()
	if p := testkit.Predicate(t, readBundle(t, h.f, receiptOf(t, r))); p.Agent.ID != "agent-a" {
		t.Fatalf("receipt names agent %s", p.Agent.ID)
	}
	if resp, body := h.do(t, mcpReq{method: "DELETE", session: idA, grant: grantA}); resp.StatusCode != 200 {
		t.Fatalf("DELETE of A's session with A's grant: %d %s", resp.StatusCode, body)
	}
	if code, _, body := h.callRaw(t, idA, grantA, "echo", []byte(`{}`)); code != http.StatusNotFound || !strings.HasPrefix(body, "Session terminated: ") {
		t.Fatalf("a call on A's session after its DELETE: %d %q", code, body)
	}
}

// Row 8: arguments that are not a JSON object, or not valid UTF-8, are refused with a
// tool error naming the problem, never reach the upstream, and never give an
// "Upstream error" or an `error` receipt.
func TestHostileBadArguments(t *testing.T) {
	h := startHostileGateway(t, gateway.HTTPConfig{}, nil)
	grant := h.grant(t, "agent-a", time.Hour)
	id := h.initialize(t, grant)
	code, r, body := h.callRaw(t, id, grant, "echo", []byte(`[1,2,3]`))
	if code != 200 || !r.IsError || !strings.Contains(text(*r), "not a JSON object") || strings.Contains(text(*r), "Upstream error") {
		t.Fatalf("array arguments: %d %s", code, body)
	}
	h.g.Flush()
	p := testkit.Predicate(t, readBundle(t, h.f, strings.TrimSuffix(strings.SplitN(text(*r), "(receipt ", 2)[1], ")")))
	if p.Execution.Status != receipt.StatusDenied || !strings.Contains(p.Execution.Reason, "got an array") {
		t.Fatalf("receipt of array arguments: %s %q", p.Execution.Status, p.Execution.Reason)
	}
	code, r, body = h.callRaw(t, id, grant, "echo", []byte("{\"m\":\"\xff\xfe\"}"))
	if code != 200 || !r.IsError || !strings.Contains(text(*r), "not valid JSON") || !strings.Contains(text(*r), "UTF-8") || strings.Contains(text(*r), "Upstream error") {
		t.Fatalf("invalid UTF-8 arguments: %d %s", code, body)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("the upstream was reached %d times", n)
	}
}

// Row 7: with a remote log (64 KB per append), a call whose receipt cannot fit is
// refused before forwarding; a result that brings the receipt over the cap after the
// upstream acted still gets a receipt, logged by hash, that verifies.
func TestHostileReceiptOverLogCap(t *testing.T) {
	logKey, logProxy := startLog(t)
	h := startHostileGateway(t, gateway.HTTPConfig{}, func(cfg map[string]any) {
		delete(cfg, "logFile")
		cfg["log"] = map[string]any{"url": logProxy.ts.URL + "/append", "timeoutMs": 5000}
	})
	grant := h.grant(t, "agent-a", time.Hour)
	id := h.initialize(t, grant)
	bigArgs := []byte(`{"blob":"` + strings.Repeat("a", 70<<10) + `"}`)
	code, r, body := h.callRaw(t, id, grant, "echo", bigArgs)
	if code != 200 || !r.IsError || !strings.HasPrefix(text(*r), "Not executed") || !strings.Contains(text(*r), "nothing was forwarded") {
		t.Fatalf("call with 70 KB of arguments: %d %.300s", code, body)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("the upstream was reached %d times for a call whose receipt cannot be logged", n)
	}
	code, r, body = h.callRaw(t, id, grant, "big", []byte(`{}`))
	if code != 200 || r.IsError {
		t.Fatalf("call with a 100 KB result: %d %.300s", code, body)
	}
	b := readBundle(t, h.f, receiptOf(t, r))
	rep := verifyBundle(b, h.f, logKey)
	if !rep.Verified {
		t.Fatalf("the receipt of the 100 KB result does not verify: %+v", rep.Checks)
	}
}

func verifyBundle(b *receipt.Bundle, f *fixture, logKey *signer.Key) *conformance.Report {
	return conformance.Verify(b, conformance.Options{IssuerKeys: []signer.PublicKey{f.gw.Public()},
		PrincipalKeys: []signer.PublicKey{f.alice.Public()}, LogKeys: []signer.PublicKey{logKey.Public()}})
}

// Row 6: proof of possession. A grant that names an agentKey is useless without that
// key: every request must carry X-Svc-Proof signed by it over the method, path,
// session, time and body digest; a missing, foreign, stale, replayed or
// other-body proof is refused with 403 and nothing reaches the upstream. With
// RequireProof, a grant without agentKey is refused.
func TestHostileProofOfPossession(t *testing.T) {
	h := startHostileGateway(t, gateway.HTTPConfig{}, nil)
	agentKey, _ := signer.GenerateKey()
	pk := agentKey.Public()
	env, _ := receipt.SignJSON(receipt.PayloadDelegation, receipt.NewGrant("alice", "keyed-agent", []string{"echo"}, time.Now().Add(-time.Minute), time.Hour, &pk, nil), h.f.alice)
	grant := grantHeader(env)
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	send := func(session, body, proof string) (int, http.Header, string) {
		t.Helper()
		resp, b := h.do(t, mcpReq{method: "POST", session: session, grant: grant, proof: proof, body: strings.NewReader(body)})
		return resp.StatusCode, resp.Header, b
	}
	now := func() time.Time { return time.Unix(0, h.now.Load()) }
	// The grant alone (as copied out of a receipt): refused.
	if code, _, body := send("", initBody, ""); code != http.StatusForbidden || !strings.Contains(body, "X-Svc-Proof") {
		t.Fatalf("initialize with the grant and no proof: %d %s", code, body)
	}
	stranger, _ := signer.GenerateKey()
	bad := map[string]string{
		"signed by another key": gateway.SignProof(stranger, "POST", "/mcp", "", now(), []byte(initBody)),
		"stale":                 gateway.SignProof(agentKey, "POST", "/mcp", "", now().Add(-10*time.Minute), []byte(initBody)),
		"over another body":     gateway.SignProof(agentKey, "POST", "/mcp", "", now(), []byte(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)),
		"for another path":      gateway.SignProof(agentKey, "POST", "/other", "", now(), []byte(initBody)),
		"malformed":             "t=1, sig=!!",
	}
	for name, proof := range bad {
		if code, _, body := send("", initBody, proof); code != http.StatusForbidden || !strings.Contains(body, "grant rejected") {
			t.Fatalf("proof %s: %d %s", name, code, body)
		}
	}
	proof := gateway.SignProof(agentKey, "POST", "/mcp", "", now(), []byte(initBody))
	code, hdr, body := send("", initBody, proof)
	id := hdr.Get("Mcp-Session-Id")
	if code != 200 || id == "" {
		t.Fatalf("initialize with a good proof: %d %s", code, body)
	}
	if code, _, body := send("", initBody, proof); code != http.StatusForbidden || !strings.Contains(body, "used before") {
		t.Fatalf("the same proof replayed: %d %s", code, body)
	}
	notif := `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	send(id, notif, gateway.SignProof(agentKey, "POST", "/mcp", id, now(), []byte(notif)))
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"m":"x"}}}`
	if code, _, body := send(id, call, gateway.SignProof(agentKey, "POST", "/mcp", "", now(), []byte(call))); code != http.StatusForbidden {
		t.Fatalf("a proof that does not name the session: %d %s", code, body)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("the upstream was reached %d times", n)
	}
	code, _, body = send(id, call, gateway.SignProof(agentKey, "POST", "/mcp", id, now(), []byte(call)))
	if code != 200 || !strings.Contains(body, "args of") || gateway.FastCalls(h.g) != 1 {
		t.Fatalf("a call with a good proof: %d %s (%d through the fast path)", code, body, gateway.FastCalls(h.g))
	}
	// --require-proof: a grant without agentKey is refused, one with it works.
	rp := startHostileGateway(t, gateway.HTTPConfig{RequireProof: true}, nil)
	resp, body := rp.do(t, mcpReq{method: "POST", grant: rp.grant(t, "bearer-agent", time.Hour), body: strings.NewReader(initBody)})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "requires proof of possession") {
		t.Fatalf("require-proof, grant without agentKey: %d %s", resp.StatusCode, body)
	}
}

// Row 2 over stdio: the window is checked on every call, not only at startup. A call
// after the grant expired is a tool error naming the expiry; the upstream is not
// reached and no receipt is issued (it would fail `delegation valid at receipt time`).
func TestHostileStdioGrantExpires(t *testing.T) {
	up := startCountingUpstream(t)
	f := newFixture(t, func(cfg map[string]any) {
		cfg["upstream"] = map[string]any{"url": up.url}
		delete(cfg, "facts")
		delete(cfg, "precommit")
	})
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`@id("all") permit (principal, action, resource);`), 0o644)
	expires := time.Now().Add(3 * time.Second)
	f.writeGrant(t, "grant.json", []string{"echo"}, expires.Add(-time.Minute), time.Minute, nil)
	cmd, c := startStdioGateway(t, f.config)
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	call := func() *mcp.CallToolResult {
		req := mcp.CallToolRequest{}
		req.Params.Name = "echo"
		req.Params.Arguments = map[string]any{"m": "x"}
		r, err := c.CallTool(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := call(); r.IsError {
		t.Fatalf("call inside the window: %+v", r)
	}
	for time.Now().Before(expires.Add(1200 * time.Millisecond)) { // RFC 3339 seconds in the grant
		time.Sleep(100 * time.Millisecond)
	}
	r := call()
	if !r.IsError || !strings.Contains(resText(r), "no longer valid") || !strings.Contains(resText(r), "expired") {
		t.Fatalf("call after expiry: %+v", r)
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("the upstream was reached %d times, want 1", n)
	}
	c.Close()
	cmd.Wait()
	if n := countReceipts(t, f); n != 1 {
		t.Fatalf("%d receipt files, want 1 (none for the refused call)", n)
	}
}

// Row 1, the other clients: bodies held in memory are bounded across all clients.
// With room for two bodies, two clients that stall mid-body hold it; a third
// client's request waits (it is not read into memory) and is served once they go.
func TestHostileBodyBudgetSharedByClients(t *testing.T) {
	h := startHostileGateway(t, gateway.HTTPConfig{MaxBodyBytes: 8 << 20, BodyReadTimeout: 20 * time.Second}, nil)
	grant := h.grant(t, "agent-a", time.Hour)
	var stalled []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(h.url, "/mcp"), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Expect: 100-continue: the server says "100 Continue" when the handler first
		// reads the body, which is after it reserved the body's share of the budget;
		// so once it is read, this client holds its share.
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Svc-Grant: %s\r\nContent-Length: 4000000\r\nExpect: 100-continue\r\n\r\n", grant)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(line, " 100 ") {
			t.Fatalf("a stalled client was not asked for its body: %q %v", line, err)
		}
		fmt.Fprint(c, "{")
		stalled = append(stalled, c)
	}
	done := make(chan int, 1)
	go func() {
		resp, _ := h.do(t, mcpReq{method: "POST", grant: grant, body: strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)})
		done <- resp.StatusCode
	}()
	select {
	case code := <-done:
		t.Fatalf("a third body was read while two stalled ones held the budget: %d", code)
	case <-time.After(500 * time.Millisecond):
	}
	for _, c := range stalled {
		c.Close()
	}
	select {
	case code := <-done:
		if code != 200 {
			t.Fatalf("the third request, once the others went: %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the third request was not served after the stalled clients went")
	}
}

// Row 7 with a log over NATS (the pipeline caps a leaf at 64 KB too): the same
// refusal before forwarding, the same hash append for a result that brings the
// receipt over the cap.
func TestHostileReceiptOverLogCapNATS(t *testing.T) {
	broker, err := natsembed.Start(natsembed.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Password: "pw-of-tests"})
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Shutdown()
	logKey, _ := signer.GenerateKey()
	svc, err := logservice.Start(context.Background(), logservice.Config{DataDir: t.TempDir(), NATSURL: natsembed.URL(broker, "pw-of-tests"),
		Signer: receipt.KeySigner{Key: logKey}, Keys: func(context.Context) (*signer.KeyDocument, error) { return nil, nil },
		Tenants: []logservice.TenantSpec{{ID: "fleet"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	h := startHostileGateway(t, gateway.HTTPConfig{}, func(cfg map[string]any) {
		delete(cfg, "logFile")
		cfg["log"] = map[string]any{"nats": natsembed.URL(broker, "pw-of-tests"), "tenant": "fleet"}
	})
	grant := h.grant(t, "agent-a", time.Hour)
	id := h.initialize(t, grant)
	code, r, body := h.callRaw(t, id, grant, "echo", []byte(`{"blob":"`+strings.Repeat("a", 70<<10)+`"}`))
	if code != 200 || !r.IsError || !strings.HasPrefix(text(*r), "Not executed") || h.up.calls.Load() != 0 {
		t.Fatalf("call with 70 KB of arguments: %d %.300s (upstream calls %d)", code, body, h.up.calls.Load())
	}
	code, r, body = h.callRaw(t, id, grant, "big", []byte(`{}`))
	if code != 200 || r.IsError {
		t.Fatalf("call with a 100 KB result: %d %.300s", code, body)
	}
	if rep := verifyBundle(readBundle(t, h.f, receiptOf(t, r)), h.f, logKey); !rep.Verified {
		t.Fatalf("the receipt of the 100 KB result does not verify: %q", rep.FirstFailure())
	}
}
