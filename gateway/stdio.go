package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"svc.dev/svc/receipt"
)

// mcpServer builds the agent-facing MCP server for one session. Every upstream tool
// is registered, so a call to a tool outside the grant reaches the gateway and is
// denied with a receipt (a tool error, never a protocol error); tools/list shows only
// the granted ones, unchanged.
func (g *Gateway) mcpServer(s *Session) *server.MCPServer {
	hooks := &server.Hooks{}
	hooks.AddAfterListTools(func(_ context.Context, _ any, _ *mcp.ListToolsRequest, res *mcp.ListToolsResult) {
		res.Tools = grantedTools(s, res.Tools)
	})
	srv := server.NewMCPServer("svc-gateway", receipt.Version, server.WithToolCapabilities(false), server.WithHooks(hooks))
	g.addTools(srv, func(context.Context) *Session { return s })
	return srv
}

// addTools registers every upstream tool with a handler that runs the call path for
// the session of the request.
func (g *Gateway) addTools(srv *server.MCPServer, session func(context.Context) *Session) {
	for _, u := range g.upstreams {
		for _, t := range u.Tools() {
			name := t.Name
			srv.AddTool(t, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				s := session(ctx)
				if s == nil {
					return errorResult("Denied by policy: no grant was presented for this request"), nil
				}
				return g.Call(ctx, s, name, requestArgs(req), requestMeta(req)), nil
			})
		}
	}
}

// grantedTools keeps the tools the session's grant names.
func grantedTools(s *Session, tools []mcp.Tool) []mcp.Tool {
	out := []mcp.Tool{}
	for _, t := range tools {
		if s != nil && s.chain.Leaf().HasScope(t.Name) {
			out = append(out, t)
		}
	}
	return out
}

func requestArgs(req mcp.CallToolRequest) json.RawMessage {
	if len(req.Params.RawArguments) > 0 {
		return req.Params.RawArguments
	}
	if req.Params.Arguments == nil {
		return nil
	}
	b, _ := json.Marshal(req.Params.Arguments)
	return b
}

func requestMeta(req mcp.CallToolRequest) map[string]any {
	if req.Params.Meta == nil {
		return nil
	}
	return req.Params.Meta.AdditionalFields
}

// ServeStdio serves the grant in the config file over stdin/stdout until ctx ends or
// stdin closes. stdout carries only MCP; diagnostics go to errOut.
func (g *Gateway) ServeStdio(ctx context.Context, in io.Reader, out io.Writer, errOut io.Writer) error {
	grant, err := g.cfg.LoadGrant()
	if err != nil {
		return err
	}
	s, err := g.NewSession("", grant)
	if err != nil {
		return err
	}
	g.log.Info("gateway serving over stdio", "agent", s.Agent(), "tools", len(g.ToolsFor(s)), "keyid", g.KeyID())
	stdio := server.NewStdioServer(g.mcpServer(s))
	stdio.SetErrorLogger(log.New(errOut, "gateway: ", log.LstdFlags))
	// Plain tools/call requests take the fast path (stdiofast.go); mcp-go serves
	// every other line, passed on through a pipe.
	lw := &lineWriter{w: out}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := stdio.Listen(ctx, pr, lw)
		pr.CloseWithError(io.ErrClosedPipe) // a line passed on after mcp-go stopped fails at once
		done <- err
	}()
	f := &stdioFront{g: g, s: s, out: lw, log: g.log, slots: make(chan struct{}, maxFastCalls)}
	served := make(chan error, 1)
	go func() { served <- f.serve(ctx, in, pw) }()
	select {
	case err := <-served:
		pw.Close() // mcp-go sees the end of its input and stops
		if lerr := <-done; lerr != nil {
			return lerr
		}
		return err
	case err := <-done:
		// mcp-go stopped first (the signal's context, or its own failure): calls the
		// fast path started are waited for, as mcp-go waits for its own, so that a
		// forwarded call's receipt is logged before the gateway closes its log.
		f.stop()
		return err
	}
}

// CheckGrant verifies the stdio grant at startup (a grant outside its validity window
// fails startup).
func (g *Gateway) CheckGrant() error {
	grant, err := g.cfg.LoadGrant()
	if err != nil {
		return err
	}
	_, err = g.NewSession("", grant)
	return err
}
