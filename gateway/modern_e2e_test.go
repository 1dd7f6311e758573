package gateway_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/receipt"
)

// agentAnswers is an agent's answers to what an upstream asks: it confirms every
// elicitation and names one root; it counts what it was asked.
type agentAnswers struct{ elicited, rooted atomic.Int32 }

func (a *agentAnswers) Elicit(_ context.Context, _ mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	a.elicited.Add(1)
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"confirm": true}}}, nil
}

func (a *agentAnswers) ListRoots(_ context.Context, _ mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	a.rooted.Add(1)
	return &mcp.ListRootsResult{Roots: []mcp.Root{{URI: "file:///srv/app", Name: "app"}}}, nil
}

// TestGatewayRelaysInputRequiredFromModernUpstream: an upstream on the stateless
// 2026-07-28 revision (e2e/modern-server.mjs, the official TypeScript SDK's server
// package 2.4.0, over stdio) asks for a confirmation (elicitation/create) and the
// client's roots (roots/list) with an input_required result. Through the gateway:
//   - an agent on an earlier revision (2025-11-25) is asked both within its call, as
//     server requests, and gets the final result of the call made again with its
//     answers and the upstream's requestState; one receipt, recording the two
//     requests relayed (claimed);
//   - an agent on 2026-07-28 gets the input_required result as sent, answers with a
//     retry of its own (mcp-go's client does), which the gateway forwards with its
//     inputResponses and requestState; a receipt per request, the first recording
//     the requests passed to the agent.
//
// Every receipt verifies.
func TestGatewayRelaysInputRequiredFromModernUpstream(t *testing.T) {
	nodeModules(t)
	for _, tc := range []struct {
		name, version string
		receipts      int
	}{
		{"agent on 2025-11-25", mcp.LATEST_LEGACY_PROTOCOL_VERSION, 1},
		{"agent on 2026-07-28", mcp.LATEST_PROTOCOL_VERSION, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := growFixture(t, []string{"deploy"}, map[string]map[string]any{
				"modern": {"command": "node", "args": []string{filepath.Join(repoDir, "e2e", "modern-server.mjs")}},
			})
			answers := &agentAnswers{}
			c, stop := stdioAgent(t, f.config, tc.version, mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapability{}},
				client.WithElicitationHandler(answers), client.WithRootsHandler(answers))
			defer stop()
			callDeploy(t, c)
			if answers.elicited.Load() != 1 || answers.rooted.Load() != 1 {
				t.Fatalf("the agent was asked %d elicitations and %d roots/list, want 1 each", answers.elicited.Load(), answers.rooted.Load())
			}
			waitForReceipts(t, f, tc.receipts)
			files := receiptFiles(f)
			if len(files) != tc.receipts {
				t.Fatalf("%d receipts, want %d", len(files), tc.receipts)
			}
			relayed := 0
			for _, file := range files {
				_, p := readReceipt(t, file)
				if p.Execution.Status != receipt.StatusExecuted {
					t.Fatalf("receipt of %s: %s (%s)", p.Tool.Name, p.Execution.Status, p.Execution.Error)
				}
				if r := p.Relayed; r != nil {
					relayed++
					if r.Requests["elicitation/create"] != 1 || r.Requests["roots/list"] != 1 || len(r.Requests) != 2 || r.Provenance != receipt.Claimed {
						t.Fatalf("relayed %+v, want one elicitation/create and one roots/list, claimed", r)
					}
					if tc.receipts == 2 && !strings.Contains(string(p.Execution.Result), `"input_required"`) {
						t.Fatalf("the receipt that records the requests passed to the agent records %s", p.Execution.Result)
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
		})
	}
}

// deploy calls e2e/modern-server.mjs's deploy {env: prod} (within 60 s).
func deploy(c *client.Client) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = "deploy"
	req.Params.Arguments = map[string]any{"env": "prod"}
	return c.CallTool(ctx, req)
}

// callDeploy is deploy, answered with the text of a deployment the agent confirmed,
// naming its roots.
func callDeploy(t *testing.T, c *client.Client) {
	t.Helper()
	res, err := deploy(c)
	if want := "deployed to prod (state asked-prod, roots file:///srv/app)"; err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(mcp.TextContent).Text != want {
		t.Fatalf("deploy: %v %+v, want %q", err, res, want)
	}
}

// stdioAgent starts `svc gateway --config config` over stdio and an agent on it
// (mcp-go's client with opts) initialized on revision version declaring caps; stop
// ends both.
func stdioAgent(t *testing.T, config, version string, caps mcp.ClientCapabilities, opts ...client.ClientOption) (*client.Client, func()) {
	t.Helper()
	cmd, stdin, stdout := startGatewayProcess(t, config, os.Stderr)
	// The gateway reads its stdin once its upstream is up: seconds on a loaded machine.
	c := client.NewClient(transport.NewIO(stdout, stdin, nil), append(opts, client.WithDiscoverTimeout(50*time.Second))...)
	initAgent(t, c, version, caps)
	return c, func() { c.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() }
}

// initAgent starts c and initializes it on revision version declaring caps.
func initAgent(t *testing.T, c *client.Client, version string, caps mcp.ClientCapabilities) {
	t.Helper()
	// Started for the client's life: the requests it is sent are served under it.
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = version
	init.Params.Capabilities = caps
	if r, err := c.Initialize(ctx, init); err != nil || r.ProtocolVersion != version {
		t.Fatalf("initialize: %v %+v", err, r)
	}
}

// modernAgent starts a gateway over stdio in front of e2e/modern-server.mjs and an
// agent (mcp-go's client) on revision version declaring caps.
func modernAgent(t *testing.T, version string, caps mcp.ClientCapabilities) (*fixture, *client.Client, func()) {
	t.Helper()
	f := growFixture(t, []string{"deploy", "echo"}, map[string]map[string]any{
		"modern": {"command": "node", "args": []string{filepath.Join(repoDir, "e2e", "modern-server.mjs")}},
	})
	c, stop := stdioAgent(t, f.config, version, caps)
	return f, c, stop
}

// TestGatewayKeepsModernUpstreamsMissingCapability: an agent that declares no
// elicitation calls a tool of a 2026-07-28 upstream (the official SDK's server) that
// asks for one; the upstream answers -32021, naming the capabilities it requires in
// data.requiredCapabilities, and the agent's result shows that data as sent.
func TestGatewayKeepsModernUpstreamsMissingCapability(t *testing.T) {
	f, c, stop := modernAgent(t, mcp.LATEST_LEGACY_PROTOCOL_VERSION, mcp.ClientCapabilities{})
	defer stop()
	res, err := deploy(c)
	if err != nil || !res.IsError {
		t.Fatalf("deploy without elicitation: %v %+v, want an upstream error", err, res)
	}
	got := res.Content[0].(mcp.TextContent).Text
	if !strings.Contains(got, "code -32021") || !strings.Contains(got, `"requiredCapabilities":{"elicitation"`) {
		t.Fatalf("deploy without elicitation answered %q, want the upstream's -32021 with its data", got)
	}
	waitForReceipts(t, f, 1)
	verifyAll(t, f)
}

// TestGatewayDeclaresTheAgentsLogLevelToModernUpstreams: a 2026-07-28 upstream sends
// log messages for a request only when its _meta names a level. An agent on either
// revision asks for info (2025-11-25: logging/setLevel to the gateway; 2026-07-28:
// the level in each request's _meta) and gets the upstream's info message of its
// echo call: the gateway declared the level in the upstream's form, its own hop's.
func TestGatewayDeclaresTheAgentsLogLevelToModernUpstreams(t *testing.T) {
	for _, version := range []string{mcp.LATEST_LEGACY_PROTOCOL_VERSION, mcp.LATEST_PROTOCOL_VERSION} {
		t.Run(version, func(t *testing.T) {
			logged := make(chan string, 16)
			_, c, stop := modernAgent(t, version, mcp.ClientCapabilities{})
			defer stop()
			c.OnNotification(func(n mcp.JSONRPCNotification) {
				if n.Method == string(mcp.MethodNotificationMessage) {
					logged <- fmt.Sprint(n.Params.AdditionalFields["level"], " ", n.Params.AdditionalFields["data"])
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			setLevel := mcp.SetLevelRequest{}
			setLevel.Params.Level = mcp.LoggingLevelInfo
			//lint:ignore SA1019 the agent's logging/setLevel (2025-11-25) or per-request level (2026-07-28), as agents still ask
			if err := c.SetLevel(ctx, setLevel); err != nil {
				t.Fatal(err)
			}
			req := mcp.CallToolRequest{}
			req.Params.Name = "echo"
			req.Params.Arguments = map[string]any{"text": "hi"}
			if res, err := c.CallTool(ctx, req); err != nil || res.IsError {
				t.Fatalf("echo: %v %+v", err, res)
			}
			select {
			case got := <-logged:
				if got != "info echoing hi" {
					t.Fatalf("log message %q, want the upstream's info message", got)
				}
			case <-ctx.Done():
				t.Fatal("no log message reached the agent: the upstream was not told the agent's level")
			}
		})
	}
}
