package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"

	"github.com/mark3labs/mcp-go/server"

	"svc.dev/svc/gateway/internal/wire"
)

// mcpServer builds the agent-facing MCP server for the stdio session s (agentServer).
func (g *Gateway) mcpServer(s *Session) *server.MCPServer {
	return g.agentServer(&server.Hooks{}, func(context.Context) *Session { return s })
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
	lw := wire.NewLineWriter(out)
	// Notes (list_changed, an upstream's log messages) are written in order by one
	// writer, not under the watchers' lock (the agent may be slow to read); past
	// maxQueuedNotes waiting, they are dropped, as the HTTP front drops them.
	notes := make(chan []byte, maxQueuedNotes)
	go func() {
		for line := range notes {
			lw.Write(line)
		}
	}()
	defer close(notes)
	defer g.routes.watchNotes(func(n note) {
		if !n.to(s) {
			return
		}
		select {
		case notes <- n.line:
		default:
		}
	})()
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

// startupErrorCode is the JSON-RPC error code of RefuseStdio's answer (the range
// JSON-RPC leaves to servers).
const startupErrorCode = -32000

// RefuseStdio is a stdio gateway that could not start: it reads the client's
// messages from in until the first request (initialize, from an MCP client) and
// answers it on out with a JSON-RPC error carrying "svc gateway cannot start: " and
// cause, so the client shows why instead of "Connection closed". Notifications are
// ignored; it returns at the first request, at the end of in, or at a line that is
// not JSON-RPC (or over 4 MiB).
func RefuseStdio(in io.Reader, out io.Writer, cause error) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), maxMCPBody)
	for sc.Scan() {
		var msg struct {
			ID json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			return fmt.Errorf("not a JSON-RPC message on stdin: %w", err)
		}
		if len(msg.ID) == 0 || string(msg.ID) == "null" {
			continue // a notification: nothing to answer
		}
		answer, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID,
			"error": map[string]any{"code": startupErrorCode, "message": "svc gateway cannot start: " + cause.Error()}})
		if err != nil {
			return err
		}
		_, err = out.Write(append(answer, '\n'))
		return err
	}
	return sc.Err()
}
