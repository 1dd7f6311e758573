package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
)

// TestGatewayUpstreamCallTimeout: an upstream that takes a call and never answers
// gives, after the upstream's timeoutMs, SPEC's `Upstream error: … (receipt <id>)` and
// a receipt whose execution is error, which verifies.
func TestGatewayUpstreamCallTimeout(t *testing.T) {
	srv := server.NewMCPServer("silent", "1")
	srv.AddTool(mcp.NewTool("hang"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		<-ctx.Done() // never answers; the gateway's cancellation ends it
		return nil, ctx.Err()
	})
	ts := httptest.NewServer(server.NewStreamableHTTPServer(srv, server.WithStateful(true)))
	t.Cleanup(ts.Close)
	f := keyedFixture(t)
	f.writeGrant(t, "grant.json", []string{"hang"}, time.Now().Add(-time.Minute), time.Hour, nil)
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte("@id(\"allow-all\")\npermit (principal, action, resource);\n"), 0o644)
	f.writeConfig(map[string]any{
		"identity":             map[string]any{"keyFile": "gateway.key"},
		"upstream":             map[string]any{"url": ts.URL + "/mcp", "timeoutMs": 300},
		"grantFile":            "grant.json",
		"trustedPrincipalKeys": []string{"alice.pub"},
		"policyFile":           "policy.cedar",
		"receiptsDir":          "receipts",
		"logFile":              "receipts.log",
	})
	cmd, c := startStdioGateway(t, f.config)
	defer cmd.Process.Kill()
	defer c.Close()
	req := mcp.CallToolRequest{}
	req.Params.Name = "hang"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("a call the upstream never answers must end in a tool result, got %v", err)
	}
	text := res.Content[0].(mcp.TextContent).Text
	m := regexp.MustCompile(`^Upstream error: no answer within 300ms .*\(receipt ([0-9a-f-]+)\)$`).FindStringSubmatch(text)
	if !res.IsError || m == nil {
		t.Fatalf("answer %+v", res)
	}
	waitForReceipts(t, f, 1)
	if rep := verifyAll(t, f)[m[1]]; !strings.Contains(rep, "RESULT: VERIFIED") {
		t.Fatalf("receipt:\n%s", rep)
	}
	b, _ := receipt.ReadBundle(filepath.Join(f.dir, "receipts", m[1]+".json"))
	st, _ := receipt.DecodeStatement(b.Envelope)
	p, _ := st.DecodePredicate()
	if p.Execution.Status != receipt.StatusError {
		t.Fatalf("receipt status %s, want error", p.Execution.Status)
	}
}

// TestGatewayHTTPRefusesForeignOrigin: a browser page on another origin cannot drive
// the HTTP gateway (403 before the grant is read); the gateway's own origin and one
// allowed by --allow-origin can, as can a client that sends no Origin.
func TestGatewayHTTPRefusesForeignOrigin(t *testing.T) {
	f := newFixture(t, func(cfg map[string]any) { delete(cfg, "grantFile") })
	addr := testkit.StartProcess(t, exec.Command(svcBin, "gateway", "--config", f.config, "--http", "--port", "0", "--allow-origin", "https://app.example"),
		regexp.MustCompile(`msg="gateway listening" addr=(\S+)`))
	grant := f.writeGrant(t, "http-grant.json", []string{"echo"}, time.Now().Add(-time.Minute), time.Hour, nil)
	for origin, want := range map[string]int{"": 200, "http://" + addr: 200, "https://app.example": 200, "http://evil.example": 403, "null": 403} {
		req, _ := http.NewRequest("POST", "http://"+addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("X-Svc-Grant", grantHeader(grant))
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, body := testkit.Send(t, req)
		if resp.StatusCode != want || (want == 403 && !strings.Contains(body, "origin refused")) {
			t.Errorf("Origin %q: %d %s, want %d", origin, resp.StatusCode, body, want)
		}
	}
}

// TestGatewayStdioRelaysProgress: the agent's progressToken reaches a stdio upstream
// (the npm server-everything) as a token of the gateway's own, and the upstream's
// progress notifications come back to the agent under the agent's token.
func TestGatewayStdioRelaysProgress(t *testing.T) {
	const tool = "trigger-long-running-operation"
	f := newFixture(t, nil)
	f.writeGrant(t, "grant.json", []string{tool}, time.Now().Add(-time.Minute), time.Hour, nil)
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(e2ePolicy+"permit (principal, action == Action::\""+tool+"\", resource);\n"), 0o644)
	cmd, c := startStdioGateway(t, f.config)
	defer cmd.Process.Kill()
	defer c.Close()
	var mu sync.Mutex
	var tokens []any
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			mu.Lock()
			tokens = append(tokens, n.Params.AdditionalFields["progressToken"])
			mu.Unlock()
		}
	})
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = map[string]any{"duration": 0.3, "steps": 3}
	req.Params.Meta = &mcp.Meta{ProgressToken: "agent-token-7"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, req)
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(tokens) != 3 {
		t.Fatalf("%d progress notifications reached the agent, want 3: %v", len(tokens), tokens)
	}
	for _, tok := range tokens {
		if tok != "agent-token-7" {
			t.Fatalf("progress under token %v, want the agent's", tok)
		}
	}
}
