package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/httplimits"
)

// The tools/call fast path of the Streamable HTTP front, as the stdio front has one
// (stdiofast.go): a POST whose body is one plain tools/call request (decodeToolCall)
// on a live session, for a tool an upstream offers, runs the call path with the
// session's state and is answered here, as the stdio fast path answers it
// (resultLine: the upstream's result as sent with _meta["svc/receipt"]), in the
// application/json response mcp-go writes. mcp-go's handler would decode the body
// four more times, start a goroutine for notifications, and encode the answer through
// its types. Everything else goes to mcp-go unchanged: initialize, tools/list, GET,
// DELETE, notifications (a notifications/cancelled also cancels a fast-path call it
// names), responses, batches, and whatever mcp-go might answer otherwise: a request
// of the stateless protocol era (by header or _meta), an unsupported
// Mcp-Protocol-Version header, another content type, a Host that mcp-go's DNS
// rebinding protection refuses, whatever decodeToolCall declines.
//
// The gateway sends the agent nothing while a fast-path call runs, except the
// requests an upstream on 2026-07-28 makes with an input_required result: the
// answer then becomes an event stream (callStream), as mcp-go's would.

// httpFastCall decodes a POST on a live session as a tools/call the fast path
// answers (false: mcp-go's).
func (g *Gateway) httpFastCall(r *http.Request, body []byte) (*toolCallRequest, bool) {
	if !fastHTTPRequest(r) {
		return nil, false
	}
	req, ok := decodeToolCall(body)
	if !ok || !g.fastTool(req.name, true) {
		return nil, false
	}
	return req, true
}

// fastHTTPRequest reports whether mcp-go would answer the POST r as a plain
// request of the stateful revisions: a JSON body, a protocol version header of
// those revisions (or none), a Host its DNS rebinding protection takes.
func fastHTTPRequest(r *http.Request) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	if v := r.Header.Get(mcp.HeaderProtocolVersion); v != "" && (!mcp.IsValidProtocolVersion(v) || mcp.IsModernProtocol(v)) {
		return false
	}
	return !rebinding(r)
}

// serveToolsList answers a plain tools/list on a live session with the granted tools
// as their upstreams sent them (toolslist.go); false: mcp-go's.
func (g *Gateway) serveToolsList(w http.ResponseWriter, r *http.Request, s *Session, body []byte) bool {
	if !fastHTTPRequest(r) {
		return false
	}
	id, ok := decodeToolsList(body)
	if !ok {
		return false
	}
	line := g.toolsListLine(s, id)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(line)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(line)
	return true
}

// servePassThrough answers a request of a passed-through feature on a live session
// (passthrough.go); false: mcp-go's.
func (g *Gateway) servePassThrough(w http.ResponseWriter, r *http.Request, s *Session, body []byte) bool {
	if !fastHTTPRequest(r) {
		return false
	}
	line, ok := g.forwardFeature(r.Context(), s, body)
	if !ok {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(line)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(line)
	return true
}

// serveFastCall answers one fast-path call of session s: 200, application/json, the
// JSON-RPC answer as mcp-go's encoder ends it (a newline), with its Content-Length:
// net/http would send an answer over 2 KB without one in chunks. The call is
// cancelled when the client goes away or sends notifications/cancelled naming it
// (calls: the session's calls in flight). When the upstream asks the agent for input
// within the call (one on 2026-07-28 answering input_required), the answer becomes
// an event stream instead (callStream).
func (g *Gateway) serveFastCall(w http.ResponseWriter, r *http.Request, s *Session, calls *inflightCalls, asks *agentAsks, req *toolCallRequest) {
	ctx, done := calls.start(r.Context(), req.id)
	defer done()
	cs := &callStream{w: w, rc: http.NewResponseController(w), asks: asks}
	line := g.answerCall(ctx, g.log, s, req, cs.ask)
	if cs.streaming() {
		if err := cs.event(line); err != nil {
			g.log.Warn("writing the answer to a tool call", "err", err)
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(line)))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(line); err != nil {
		g.log.Warn("writing the answer to a tool call", "err", err)
	}
}

// callStream is a fast-path call's HTTP answer, which turns into an event stream
// (as mcp-go turns a call's answer into one) the first time the upstream asks the
// agent for something within the call: each request is an event on it, the agent's
// answer a POST the session's agentAsks take, and the call's answer the last event.
// Unused, the answer stays one application/json body.
type callStream struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	asks *agentAsks
	mu   sync.Mutex
	sse  bool
}

// ask relays one request to the agent on the call's stream (upstream.Call's Ask).
func (c *callStream) ask(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	return c.asks.askVia(ctx, method, params, c.event)
}

// event writes msg (one JSON-RPC message) as an event, starting the stream first.
func (c *callStream) event(msg []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.sse {
		c.sse = true
		c.w.Header().Set("Content-Type", "text/event-stream")
		c.w.Header().Set("Cache-Control", "no-cache")
		c.w.WriteHeader(http.StatusOK)
	}
	if _, err := fmt.Fprintf(c.w, "event: message\ndata: %s\n\n", bytes.TrimRight(msg, "\n")); err != nil {
		return err
	}
	return c.rc.Flush()
}

// streaming reports whether the answer became an event stream.
func (c *callStream) streaming() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sse
}

// rebinding reports whether mcp-go's DNS rebinding protection would refuse the
// request (server.WithDisableLocalhostProtection is not set): it arrived on a loopback
// address with a Host that is not one.
func rebinding(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && local != nil && httplimits.LoopbackHost(local.String()) && !httplimits.LoopbackHost(r.Host)
}
