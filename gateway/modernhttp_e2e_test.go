package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway"
	"svc.dev/svc/receipt"
)

// startModernHTTP runs e2e/modern-server.mjs over Streamable HTTP (the official
// TypeScript SDK's server package on 2026-07-28) and returns its URL.
func startModernHTTP(t *testing.T) string {
	t.Helper()
	return startNodeHTTP(t, "modern-server.mjs")
}

// TestHTTPFastPathRelaysInputRequiredFromModernHTTPUpstream: an upstream on
// 2026-07-28 over Streamable HTTP (e2e/modern-server.mjs --http) answers deploy with
// input_required (an elicitation and a roots/list). An agent on 2025-11-25 (mcp-go's
// client) over the gateway's HTTP front is asked both within its call, on the call's
// own event stream, and gets the result of the call made again with its answers; its
// plain echo call is answered as before, as one JSON body. Both calls took the fast
// path; deploy's one receipt records the two requests relayed, and every receipt
// verifies.
func TestHTTPFastPathRelaysInputRequiredFromModernHTTPUpstream(t *testing.T) {
	f := growFixture(t, []string{"deploy", "echo"}, map[string]map[string]any{"modern": {"url": startModernHTTP(t)}})
	g := newGateway(t, f)
	url := serveHTTP(t, g, gateway.HTTPConfig{})
	grant, _ := os.ReadFile(filepath.Join(f.dir, "grant.json"))
	var env receipt.Envelope
	if err := json.Unmarshal(grant, &env); err != nil {
		t.Fatal(err)
	}
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPHeaders(map[string]string{"X-Svc-Grant": grantHeader(&env)}))
	if err != nil {
		t.Fatal(err)
	}
	answers := &agentAnswers{}
	// One round per call: an agent on 2025-11-25 answers no input_required result
	// itself (mcp-go's client would, whatever its revision).
	c := client.NewClient(tr, client.WithElicitationHandler(answers), client.WithRootsHandler(answers), client.WithMaxInputRoundTrips(1))
	defer c.Close()
	initAgent(t, c, mcp.LATEST_LEGACY_PROTOCOL_VERSION, mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapability{}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, call := range []struct{ tool, arg, want string }{
		{"echo", "text", "plain"},
		{"deploy", "env", "deployed to prod (state asked-prod, roots file:///srv/app)"},
	} {
		req := mcp.CallToolRequest{}
		req.Params.Name = call.tool
		req.Params.Arguments = map[string]any{call.arg: map[string]string{"echo": "plain", "deploy": "prod"}[call.tool]}
		res, err := c.CallTool(ctx, req)
		if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(mcp.TextContent).Text != call.want {
			t.Fatalf("%s: %v %+v, want %q", call.tool, err, res, call.want)
		}
	}
	if answers.elicited.Load() != 1 || answers.rooted.Load() != 1 {
		t.Fatalf("the agent was asked %d elicitations and %d roots/list, want 1 each", answers.elicited.Load(), answers.rooted.Load())
	}
	if n := gateway.FastCalls(g); n != 2 {
		t.Fatalf("the fast path answered %d calls, want both", n)
	}
	if err := g.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := len(receiptFiles(f)); n != 2 {
		t.Fatalf("%d receipts, want one per call", n)
	}
	checkRelayedReceipts(t, f, map[string]uint64{"elicitation/create": 1, "roots/list": 1})
}

// checkRelayedReceipts: f's receipts are of executed calls, one of them recording
// the requests relayed (want, claimed), and every one verifies.
func checkRelayedReceipts(t *testing.T, f *fixture, want map[string]uint64) {
	t.Helper()
	relayed := 0
	for _, file := range receiptFiles(f) {
		_, p := readReceipt(t, file)
		if p.Execution.Status != receipt.StatusExecuted {
			t.Fatalf("receipt of %s: %s (%s)", p.Tool.Name, p.Execution.Status, p.Execution.Error)
		}
		if r := p.Relayed; r != nil {
			relayed++
			if fmt.Sprint(r.Requests) != fmt.Sprint(want) || r.Provenance != receipt.Claimed {
				t.Fatalf("relayed %+v, want %v, claimed", r, want)
			}
		}
	}
	if relayed != 1 {
		t.Fatalf("%d receipts record relayed requests, want 1", relayed)
	}
	for id, rep := range verifyAll(t, f) {
		if !strings.Contains(rep, "RESULT: VERIFIED") {
			t.Fatalf("receipt %s:\n%s", id, rep)
		}
	}
}

// TestStdioFrontRelaysInputRequiredFromModernHTTPUpstream: the same upstream over
// Streamable HTTP, an agent on 2025-11-25 over the stdio front: its deploy call is
// handed to mcp-go's server (the stdio fast path cannot ask the agent), which asks
// it both requests within the call; one receipt per call, every one verifies.
func TestStdioFrontRelaysInputRequiredFromModernHTTPUpstream(t *testing.T) {
	f := growFixture(t, []string{"deploy", "echo"}, map[string]map[string]any{"modern": {"url": startModernHTTP(t)}})
	answers := &agentAnswers{}
	c, stop := stdioAgent(t, f.config, mcp.LATEST_LEGACY_PROTOCOL_VERSION, mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapability{}},
		client.WithElicitationHandler(answers), client.WithRootsHandler(answers), client.WithMaxInputRoundTrips(1))
	defer stop()
	callDeploy(t, c)
	waitForReceipts(t, f, 1)
	if n := len(receiptFiles(f)); n != 1 {
		t.Fatalf("%d receipts, want one", n)
	}
	checkRelayedReceipts(t, f, map[string]uint64{"elicitation/create": 1, "roots/list": 1})
}
