package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/gateway"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// frontPair is one gateway behind two HTTP fronts: with the tools/call fast path and
// without it (every request to mcp-go, as before), each with a session opened under
// the same grant.
type frontPair struct {
	h               *hostileGateway
	grant           string
	fast, ref       http.Handler
	fastID, refID   string
	contentTypes    []string
	protocolHeaders []string
}

func newFrontPair(t testing.TB) *frontPair {
	h := startHostileGateway(t, gateway.HTTPConfig{}, nil)
	p := &frontPair{h: h, grant: h.grant(t, "diff-agent", 24*time.Hour),
		fast: h.g.Handler(gateway.HTTPConfig{}), ref: gateway.HandlerWithoutFastPath(h.g, gateway.HTTPConfig{}),
		contentTypes:    []string{"application/json", "application/json; charset=utf-8", "text/plain", ""},
		protocolHeaders: []string{"2025-06-18", "", "2025-03-26", "2026-07-28", "1999-01-01"},
	}
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, s := range []struct {
		h  http.Handler
		id *string
	}{{p.fast, &p.fastID}, {p.ref, &p.refID}} {
		rec := p.send(s.h, "", initBody, 0, 0, false)
		*s.id = rec.Header().Get("Mcp-Session-Id")
		if rec.Code != 200 || *s.id == "" {
			t.Fatalf("initialize: %d %s", rec.Code, rec.Body.String())
		}
		p.send(s.h, *s.id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, 0, 0, false)
	}
	return p
}

// send posts body on session with the grant; ct and proto pick the Content-Type and
// Mcp-Protocol-Version headers; rebind makes it arrive on a loopback address with a
// Host that is not one.
func (p *frontPair) send(h http.Handler, session, body string, ct, proto uint8, rebind bool) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/mcp", strings.NewReader(body))
	if c := p.contentTypes[int(ct)%len(p.contentTypes)]; c != "" {
		req.Header.Set("Content-Type", c)
	}
	if v := p.protocolHeaders[int(proto)%len(p.protocolHeaders)]; v != "" {
		req.Header.Set("Mcp-Protocol-Version", v)
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Svc-Grant", p.grant)
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	if rebind {
		req.Host = "attacker.example"
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}))
	}
	ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second) // a subscriptions/listen stream stays open until then
	defer cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req.WithContext(ctx))
	return rec
}

var receiptIDs = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// compare sends one request to both fronts and fails unless the answers agree: status,
// Content-Type, session header, and the body (as JSON when it is JSON) with receipt ids
// blanked. It reports whether the fast path answered it.
func (p *frontPair) compare(t *testing.T, body string, ct, proto uint8, rebind bool) bool {
	t.Helper()
	before := gateway.FastCalls(p.h.g)
	fast := p.send(p.fast, p.fastID, body, ct, proto, rebind)
	took := gateway.FastCalls(p.h.g) != before
	ref := p.send(p.ref, p.refID, body, ct, proto, rebind)
	fb, rb := receiptIDs.ReplaceAllString(fast.Body.String(), "ID"), receiptIDs.ReplaceAllString(ref.Body.String(), "ID")
	if fast.Code != ref.Code || fast.Header().Get("Content-Type") != ref.Header().Get("Content-Type") ||
		fast.Header().Get("Mcp-Session-Id") != ref.Header().Get("Mcp-Session-Id") || !sameBody(fb, rb) {
		t.Fatalf("body %q (content type %d, protocol %d, rebind %v), fast path took it: %v\nfast path: %d %q %s\nmcp-go:    %d %q %s", body, ct, proto, rebind, took,
			fast.Code, fast.Header().Get("Content-Type"), fb, ref.Code, ref.Header().Get("Content-Type"), rb)
	}
	return took
}

// sameBody compares two answers as JSON when both are, else as text. An answer of
// the fast path has the receipt's _meta first and the upstream's members as sent;
// mcp-go's encoding orders them its way.
func sameBody(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return a == b
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb) && strings.HasSuffix(a, "\n") == strings.HasSuffix(b, "\n")
}

// TestHTTPFastPathDecisions: which requests the fast path answers, and that its answer
// to each is mcp-go's (as the gateway answered before it), the rest left to mcp-go.
func TestHTTPFastPathDecisions(t *testing.T) {
	p := newFrontPair(t)
	call := func(id, params string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":` + params + `}`
	}
	for _, c := range []struct {
		body      string
		ct, proto uint8
		rebind    bool
		took      bool
	}{
		{body: call(`7`, `{"name":"echo","arguments":{"a":1}}`), took: true},
		{body: call(`"s-1"`, `{"name":"echo","arguments":{}}`), took: true},
		{body: call(`8`, `{"name":"echo","arguments":{"a":1},"_meta":{"progressToken":3,"svc/receipt":"forged"}}`)}, // progress to relay: mcp-go's
		{body: call(`9`, `{"name":"echo"}`), ct: 1, proto: 1, took: true},
		{body: call(`10`, `{"name":"echo","arguments":[1]}`), proto: 2, took: true}, // a denial, with its receipt
		{body: call(`11`, `{"name":"big","arguments":{}}`), took: true},
		{body: call(`12`, `{"name":"echo","arguments":{}}`), ct: 2},
		{body: call(`13`, `{"name":"echo","arguments":{}}`), ct: 3},
		{body: call(`14`, `{"name":"echo","arguments":{}}`), proto: 3},
		{body: call(`15`, `{"name":"echo","arguments":{}}`), proto: 4},
		{body: call(`16`, `{"name":"echo","arguments":{}}`), rebind: true},
		{body: call(`17`, `{"name":"nobody-offers-this","arguments":{}}`)},
		{body: call(`1e1`, `{"name":"echo","arguments":{}}`)},
		{body: call(`"a<b"`, `{"name":"echo","arguments":{}}`)},
		{body: call(`18`, `{"name":"echo","arguments":{},"task":{"ttl":1000}}`)},
		{body: call(`19`, `{"name":"echo","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`)},
		{body: `[` + call(`20`, `{"name":"echo","arguments":{}}`) + `]`},
		{body: `{"jsonrpc":"2.0","id":21,"method":"tools/list"}`},
		{body: `{"jsonrpc":"2.0","id":22,"method":"ping"}`},
		{body: `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`},
		{body: `{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"echo"`},
		{body: `not json`},
	} {
		if took := p.compare(t, c.body, c.ct, c.proto, c.rebind); took != c.took {
			t.Errorf("%s (content type %d, protocol %d, rebind %v): fast path took it %v, want %v", c.body, c.ct, c.proto, c.rebind, took, c.took)
		}
	}
}

// FuzzHTTPFastPath: whatever the body and headers, the gateway with the fast path
// answers as the gateway without it (mcp-go) does.
func FuzzHTTPFastPath(f *testing.F) {
	p := newFrontPair(f)
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"a":1}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"echo","arguments":{"a":"\u00e9<&>"},"_meta":{"svc/model":"m"}}}`,
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":"str"}}`,
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":null,"_meta":null}}`,
		`{"jsonrpc":"2.0","id":10,"METHOD":"tools/call","Params":{"Name":"echo","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"echo","arguments":{}},"result":{}}`,
		`{"jsonrpc":"1.0","id":12,"method":"tools/call","params":{"name":"echo","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"echo","arguments":{}}}`,
		`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"echo","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-06-18"}}}`,
		`{"jsonrpc":"2.0","id":14,"method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":15,"method":"tools/list"}`,
		` {"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"echo","arguments":{}}} `,
	} {
		f.Add(s, uint8(0), uint8(0), false)
	}
	f.Add(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{}}}`, uint8(1), uint8(2), true)
	f.Fuzz(func(t *testing.T, body string, ct, proto uint8, rebind bool) {
		p.compare(t, body, ct, proto, rebind)
	})
}

// TestHTTPFastPathKeepsSessionAlive: a session whose requests all take the fast path
// (mcp-go sees none of them) stays open past the idle time while they come, and
// closes once they stop; its id then reads as mcp-go's terminated session.
func TestHTTPFastPathKeepsSessionAlive(t *testing.T) {
	h := startHostileGateway(t, gateway.HTTPConfig{}, nil)
	ts := httptest.NewServer(h.g.Handler(gateway.HTTPConfig{Idle: 1500 * time.Millisecond}))
	defer ts.Close()
	h.url = ts.URL + "/mcp"
	grant := h.grant(t, "idle-agent", time.Hour)
	id := h.initialize(t, grant)
	before := gateway.FastCalls(h.g)
	start := time.Now()
	for time.Since(start) < 4*time.Second { // more than twice the idle time
		if code, _, body := h.callRaw(t, id, grant, "echo", []byte(`{}`)); code != 200 {
			t.Fatalf("a call on a session in use, after %v: %d %s", time.Since(start), code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if gateway.FastCalls(h.g)-before < 10 {
		t.Fatalf("the fast path answered %d calls", gateway.FastCalls(h.g)-before)
	}
	noSessionsOpen(t, ts.URL)
	resp, body := h.do(t, mcpReq{method: "POST", session: id, grant: grant, body: strings.NewReader(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)})
	if resp.StatusCode != 404 || !strings.HasPrefix(body, "Session terminated: ") {
		t.Fatalf("a call on the idle session: %d %q", resp.StatusCode, body)
	}
}

// TestHTTPFastPathAnswerHasContentLength: the fast path's answer goes out with its
// length, in one piece, however long: net/http chunks an answer over 2 KB written
// without one, which a client then reassembles.
func TestHTTPFastPathAnswerHasContentLength(t *testing.T) {
	h := startHostileGateway(t, gateway.HTTPConfig{}, nil)
	grant := h.grant(t, "length-agent", time.Hour)
	id := h.initialize(t, grant)
	for _, tool := range []string{"echo", "big"} {
		before := gateway.FastCalls(h.g)
		body := strings.NewReader(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"` + tool + `","arguments":{}}}`)
		resp, answer := h.do(t, mcpReq{method: "POST", session: id, grant: grant, body: body})
		if resp.StatusCode != 200 || gateway.FastCalls(h.g) == before {
			t.Fatalf("%s: %d, fast path took it: %v", tool, resp.StatusCode, gateway.FastCalls(h.g) != before)
		}
		if len(resp.TransferEncoding) > 0 || resp.ContentLength != int64(len(answer)) {
			t.Errorf("%s: answer of %d bytes sent with Transfer-Encoding %v, Content-Length %d", tool, len(answer), resp.TransferEncoding, resp.ContentLength)
		}
	}
}

// TestRefusedRequestsDoNotKeepSessionAlive: a grant travels in every receipt, so
// whoever copies one out can send requests naming the session; refused for want of
// the agent key's proof of possession, they must not keep the session open.
func TestRefusedRequestsDoNotKeepSessionAlive(t *testing.T) {
	h := startHostileGateway(t, gateway.HTTPConfig{}, nil)
	ts := httptest.NewServer(h.g.Handler(gateway.HTTPConfig{Idle: time.Second}))
	defer ts.Close()
	agentKey, _ := signer.GenerateKey()
	pk := agentKey.Public()
	now := func() time.Time { return time.Unix(0, h.now.Load()) }
	env, _ := receipt.SignJSON(receipt.PayloadDelegation, receipt.NewGrant("alice", "keyed-agent", []string{"echo"}, now().Add(-time.Minute), time.Hour, &pk, nil), h.f.alice)
	send := func(session, body, proof string) (int, http.Header) {
		t.Helper()
		resp, _ := h.do(t, mcpReq{method: "POST", url: ts.URL + "/mcp", session: session, grant: grantHeader(env), proof: proof, body: strings.NewReader(body)})
		return resp.StatusCode, resp.Header
	}
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	code, hdr := send("", initBody, gateway.SignProof(agentKey, "POST", "/mcp", "", now(), []byte(initBody)))
	id := hdr.Get("Mcp-Session-Id")
	if code != 200 || id == "" {
		t.Fatalf("initialize with a proof: %d, session %q", code, id)
	}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{}}}`
	// Refused requests every 50 ms: the session must still close after its idle
	// second (the timer rechecks within another), which the 404 shows.
	closed := false
	for start := time.Now(); !closed && time.Since(start) < 5*time.Second; time.Sleep(50 * time.Millisecond) {
		switch code, _ := send(id, call, ""); code {
		case http.StatusForbidden:
		case http.StatusNotFound:
			closed = true
		default:
			t.Fatalf("a call on the session without a proof: %d, want 403 (or 404 once it closed)", code)
		}
	}
	if !closed {
		t.Fatal("requests refused for want of a proof kept the session open for 5 s, past its idle second")
	}
	noSessionsOpen(t, ts.URL)
	if code, _ := send(id, call, gateway.SignProof(agentKey, "POST", "/mcp", id, now(), []byte(call))); code != http.StatusNotFound {
		t.Fatalf("a call with a proof on a session idle but for refused requests: %d, want 404", code)
	}
}

// noSessionsOpen waits until the gateway at base reports no open session (/health).
func noSessionsOpen(t *testing.T, base string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get(base + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var health struct{ Sessions int }
		json.NewDecoder(resp.Body).Decode(&health)
		if health.Sessions != 0 {
			return fmt.Errorf("%d sessions open", health.Sessions)
		}
		return nil
	})
}
