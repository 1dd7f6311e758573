package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"svc.dev/svc/gateway"
	"svc.dev/svc/internal/testkit"
)

// serveHTTP runs g's HTTP front on a free port of 127.0.0.1 until the test ends and
// returns its /mcp URL.
func serveHTTP(t *testing.T, g *gateway.Gateway, cfg gateway.HTTPConfig) string {
	t.Helper()
	cfg.Host = "127.0.0.1"
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- g.ServeHTTP(ctx, cfg, func(a string) { addr <- a }) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-addr:
		return "http://" + a + "/mcp"
	case err := <-done:
		t.Fatal(err)
	}
	return ""
}

// rawAnswer is an HTTP answer as sent.
type rawAnswer struct {
	Status      int    `json:"status"`
	ContentType string `json:"contentType"`
	Body        string `json:"body"`
}

// mcpGoSessionAnswers asks mcp-go's own Streamable HTTP server, with its stateful
// session manager, what it answers a tools/call naming an unknown session and one
// naming a session terminated by DELETE.
func mcpGoSessionAnswers(t *testing.T) (unknown, terminated rawAnswer) {
	t.Helper()
	srv := server.NewMCPServer("reference", "1")
	srv.AddTool(mcp.NewTool("echo"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("echo"), nil
	})
	ts := httptest.NewServer(server.NewStreamableHTTPServer(srv, server.WithStateful(true)))
	defer ts.Close()
	do := func(method, session, body string) (rawAnswer, string) {
		req, _ := http.NewRequest(method, ts.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, body := testkit.Send(t, req)
		return rawAnswer{resp.StatusCode, resp.Header.Get("Content-Type"), body}, resp.Header.Get("Mcp-Session-Id")
	}
	callBody := `{"jsonrpc":"2.0","id":92,"method":"tools/call","params":{"name":"echo","arguments":{}}}`
	unknown, _ = do("POST", "mcp-session-00000000-0000-4000-8000-000000000000", callBody)
	_, id := do("POST", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	do("DELETE", id, "")
	terminated, _ = do("POST", id, callBody)
	return unknown, terminated
}

// TestGatewayHTTPFastPathWithTSClient: the official TypeScript client over Streamable
// HTTP, calls in flight together on one session and on three more, one cancelled
// while the others run, pings and tools/list between, 200 kB and 1.5 MB calls, a body
// over the cap, the errors, and raw requests naming an unknown session, a terminated
// one, and an open one with another grant or none. The fast path served the calls
// (its counter, the answer as sent), each answer reached its own call, the session
// errors read as mcp-go's, and every receipt verifies.
func TestGatewayHTTPFastPathWithTSClient(t *testing.T) {
	f := fastPathFixture(t)
	g := newGateway(t, f)
	url := serveHTTP(t, g, gateway.HTTPConfig{})
	grant := f.writeGrant(t, "grant.json", []string{"echo", "get-sum", "trigger-long-running-operation", "no-such-tool"}, time.Now().Add(-time.Minute), 24*time.Hour, nil)
	other := f.writeGrant(t, "other.json", []string{"echo"}, time.Now().Add(-2*time.Minute), 24*time.Hour, nil)
	var out struct {
		fastRun
		OtherEchoes                      []fastStep
		TerminatedClient, AfterOthers    fastStep
		OverCap, RawCall, UnknownSession rawAnswer
		OtherGrant, NoGrant, Terminated  rawAnswer
	}
	runNode(t, &out, "gateway-http-fastpath.mjs", url, grantHeader(grant), grantHeader(other))
	out.check(t)
	receipts := map[string]bool{}
	for i, e := range out.OtherEchoes {
		if e.Thrown != "" || e.IsError || e.Text != fmt.Sprintf("Echo: session %d call %d", i/8, i%8) || e.Receipt == "" || receipts[e.Receipt] {
			t.Fatalf("echo %d on the other sessions: %+v", i, e)
		}
		receipts[e.Receipt] = true
	}
	if len(out.OtherEchoes) != 24 || out.AfterOthers.Text != "Echo: still open" {
		t.Fatalf("%d echoes on the other sessions; after the DELETE of one: %+v", len(out.OtherEchoes), out.AfterOthers)
	}
	if out.OverCap.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over the cap: %+v", out.OverCap)
	}
	// The fast path's answer as sent: mcp-go's content type and framing, the
	// receipt's _meta in front of the upstream's members.
	if out.RawCall.Status != 200 || out.RawCall.ContentType != "application/json" ||
		!strings.HasPrefix(out.RawCall.Body, `{"jsonrpc":"2.0","id":91,"result":{"_meta":{"svc/receipt":"`) || !strings.HasSuffix(out.RawCall.Body, "}\n") {
		t.Fatalf("a raw tools/call: %+v", out.RawCall)
	}
	// mcp-go's status and words, then what to do next.
	unknown, terminated := mcpGoSessionAnswers(t)
	for _, c := range []struct{ got, mcpGo rawAnswer }{{out.UnknownSession, unknown}, {out.Terminated, terminated}} {
		if c.got.Status != 404 || c.mcpGo.Status != 404 || c.got.ContentType != c.mcpGo.ContentType ||
			!strings.HasPrefix(c.got.Body, strings.TrimSuffix(c.mcpGo.Body, "\n")+": ") || !strings.Contains(c.got.Body, "initialize a new session with a grant") {
			t.Fatalf("session errors: unknown %+v, terminated %+v; mcp-go answers %+v and %+v", out.UnknownSession, out.Terminated, unknown, terminated)
		}
	}
	if out.TerminatedClient.Thrown == "" {
		t.Fatalf("a call on the terminated session: %+v", out.TerminatedClient)
	}
	for name, a := range map[string]rawAnswer{"another grant": out.OtherGrant, "no grant": out.NoGrant} {
		if a.Status != 403 || !strings.Contains(a.Body, "grant rejected") {
			t.Fatalf("%s on an open session: %+v", name, a)
		}
	}
	// 24 + 24 echoes, the one after the cancellation, the 200 kB one, the denial, the
	// refused arguments, the raw one, the one after the DELETE: all through the fast
	// path (the 1.5 MB one too, the unknown tool not).
	if n := gateway.FastCalls(g); n < 55 {
		t.Fatalf("the fast path answered %d calls, want at least 55", n)
	}
	verifyFastPathReceipts(t, f, g, 54)
	// notifications/cancelled reached the call: its receipt was logged before that of
	// the raw call, made long after (not when the client closed its connections).
	var rawCall struct {
		Result struct {
			Meta map[string]string `json:"_meta"`
		} `json:"result"`
	}
	json.Unmarshal([]byte(out.RawCall.Body), &rawCall)
	rawBundle := readBundle(t, f, rawCall.Result.Meta["svc/receipt"])
	if leaf := checkCancelledReceipt(t, f); leaf > rawBundle.Inclusion.LeafIndex {
		t.Fatalf("the cancelled call's receipt is leaf %d, after the raw call's %d: the cancellation did not reach it", leaf, rawBundle.Inclusion.LeafIndex)
	}
}

// verifyFastPathReceipts waits for g's bundle files and verifies every receipt.
func verifyFastPathReceipts(t *testing.T, f *fixture, g *gateway.Gateway, atLeast int) {
	t.Helper()
	if err := g.Flush(); err != nil {
		t.Fatal(err)
	}
	reports := verifyAll(t, f)
	if len(reports) < atLeast {
		t.Fatalf("%d receipts, want at least %d", len(reports), atLeast)
	}
	for id, rep := range reports {
		if !strings.Contains(rep, "RESULT: VERIFIED") {
			t.Fatalf("receipt %s:\n%s", id, rep)
		}
	}
}
