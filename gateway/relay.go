package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"svc.dev/svc/gateway/upstream"
	"svc.dev/svc/receipt"
)

// What an upstream sends within a tools/call besides its answer goes to the agent
// that made the call, within its session: the notifications (notifications/progress
// for the call's progressToken, which is forwarded as the agent set it, and
// notifications/message) as sent, and the upstream's requests (sampling,
// elicitation, roots) as requests to the agent, whose answer goes back upstream. Only
// mcp-go's server can send to the agent mid-call (over HTTP it turns the call's
// response into an event stream), so a call whose upstream may send such messages
// (a Streamable HTTP one) or that carries a progressToken takes mcp-go's path, not a
// fast one (fastTool, decodeToolCall).

// An upstream on the 2026-07-28 revision asks for input with an input_required
// result per request instead (upstream.callModern): an agent on an earlier revision
// is asked each of its requests within its call, as above, and the call made again
// with the answers; an agent on 2026-07-28 gets the result as sent (the gateway
// cannot send it requests), and its retry, with inputResponses and the requestState,
// is forwarded as a call of its own, with a receipt of its own. Each hop declares
// the agent's capabilities, which decide what the upstream may ask for.

// relayCall is what mcp-go's tool handler adds to the upstream.Call for the agent of
// ctx: the relay of what the upstream sends within the call (relayTo), the agent's
// retry of an input_required result, and the capabilities it declared.
func relayCall(ctx context.Context, req mcp.CallToolRequest) upstream.Call {
	var c upstream.Call
	c.Notify, c.Ask = relayTo(ctx)
	if len(req.Params.InputResponses) > 0 {
		c.InputResponses, _ = json.Marshal(req.Params.InputResponses)
	}
	if req.Params.RequestState != "" {
		c.RequestState, _ = json.Marshal(req.Params.RequestState)
	}
	var caps *mcp.ClientCapabilities
	if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		caps = info.ClientCapabilities
	} else if cs, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo); ok {
		cc := cs.GetClientCapabilities()
		caps = &cc
	}
	if caps != nil {
		c.Capabilities, _ = json.Marshal(caps)
	}
	return c
}

// relayTo returns the upstream.Call fields that relay to the agent of ctx, the
// context mcp-go's server gave the tool handler (no relay without one; no requests
// to an agent on the 2026-07-28 revision, which takes none).
func relayTo(ctx context.Context) (notify func(string, json.RawMessage), ask func(context.Context, string, json.RawMessage) (json.RawMessage, error)) {
	srv := server.ServerFromContext(ctx)
	if srv == nil {
		return nil, nil
	}
	notify = func(method string, params json.RawMessage) {
		if method == string(mcp.MethodNotificationMessage) && !logLevelWanted(ctx, params) {
			return
		}
		if method == string(mcp.MethodNotificationToolsListChanged) {
			return // the gateway's own goes to each agent whose grant names a changed tool (routes.go)
		}
		var p map[string]any
		if len(params) > 0 && json.Unmarshal(params, &p) != nil {
			return
		}
		_ = srv.SendNotificationToClient(ctx, method, p)
	}
	ask = func(_ context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
		// Under the call's context, which names the agent's session (the upstream's
		// may be its standalone stream's) and ends with the call.
		if a := askerFrom(ctx); a != nil && askedByFront(method) {
			return a.ask(ctx, method, params) // the agent's error as it sent it
		}
		res, err := askAgent(ctx, srv, method, params)
		if err != nil {
			return nil, upstream.NewRPCError(mcp.INTERNAL_ERROR, "the agent did not answer "+method+": "+err.Error(), nil)
		}
		return json.Marshal(res)
	}
	if server.IsModernRequest(ctx) {
		ask = nil
	}
	return notify, ask
}

// logLevelWanted reports whether the agent of ctx asked for log messages of the level
// params names (logging/setLevel, which the gateway takes; mcp-go's default is error).
func logLevelWanted(ctx context.Context, params json.RawMessage) bool {
	var p struct {
		Level mcp.LoggingLevel `json:"level"`
	}
	if json.Unmarshal(params, &p) != nil {
		return false
	}
	if sl, ok := server.ClientSessionFromContext(ctx).(server.SessionWithLogging); ok {
		return p.Level.ShouldSendTo(sl.GetLogLevel())
	}
	return true
}

// askAgent sends the upstream's request to the agent through mcp-go's server.
func askAgent(ctx context.Context, srv *server.MCPServer, method string, params json.RawMessage) (any, error) {
	switch method {
	case string(mcp.MethodSamplingCreateMessage):
		var req mcp.CreateMessageRequest
		if err := json.Unmarshal(params, &req.CreateMessageParams); err != nil {
			return nil, fmt.Errorf("params: %w", err)
		}
		//lint:ignore SA1019 relayed for upstreams on the revisions that have sampling (before 2026-07-28)
		return srv.RequestSampling(ctx, req)
	case string(mcp.MethodElicitationCreate):
		var req mcp.ElicitationRequest
		if err := json.Unmarshal(params, &req.Params); err != nil {
			return nil, fmt.Errorf("params: %w", err)
		}
		return srv.RequestElicitation(ctx, req)
	case string(mcp.MethodListRoots):
		return srv.RequestRoots(ctx, mcp.ListRootsRequest{})
	}
	return nil, errors.New("the gateway relays no such request")
}

// fastTool reports whether a fast path may answer a call of tool: an upstream offers
// it and cannot send the agent anything mid-call, or may only answer input_required
// (2026-07-28) and the front's fast path relays that itself (asks: the HTTP front's,
// callStream); the stdio front's hands such a call to mcp-go, which relays it.
func (g *Gateway) fastTool(tool string, asks bool) bool {
	up := g.routes.ownerOf(tool)
	if up == nil {
		return false
	}
	if r, ok := up.(interface{ Relays() bool }); ok && r.Relays() {
		return false
	}
	a, ok := up.(interface{ AsksForInput() bool })
	return asks || !ok || !a.AsksForInput()
}

// relayCount counts the requests an upstream sent the agent within one call, by
// method, for the receipt's relayed member (claimed: the parties' exchange is not
// recorded, only that it took place).
type relayCount struct {
	mu sync.Mutex
	n  map[string]uint64
}

// counting is ask counting each request it relays (nil: ask, nil, refusing them).
func (r *relayCount) counting(ask func(context.Context, string, json.RawMessage) (json.RawMessage, error)) func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	if ask == nil {
		return nil
	}
	return func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
		r.mu.Lock()
		if r.n == nil {
			r.n = map[string]uint64{}
		}
		r.n[method]++
		r.mu.Unlock()
		return ask(ctx, method, params)
	}
}

// passed counts the requests of an input_required result that goes to the agent as
// its answer (an upstream on the 2026-07-28 revision, an agent on it too).
func (r *relayCount) passed(res *mcp.CallToolResult) {
	if res == nil || res.ResultType != mcp.ResultTypeInputRequired {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]uint64{}
	}
	for _, req := range res.InputRequests {
		r.n[string(req.Method)]++
	}
}

// record is the receipt's relayed member; nil when the call relayed nothing.
func (r *relayCount) record() *receipt.Relayed {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.n) == 0 {
		return nil
	}
	return &receipt.Relayed{Requests: r.n, Provenance: receipt.Claimed}
}

// maxQueuedNotes bounds the notes waiting for a stdio agent to read them.
const maxQueuedNotes = 64

// relayLogs has the log messages u sends outside any call's stream (upstream.WatchLogs:
// a stdio upstream's, which name no call) told to the sessions using u: MCP's log
// messages belong to the session, not to a call.
func (g *Gateway) relayLogs(u upstream.Upstream) {
	upstream.WatchLogs(u, func(params json.RawMessage) {
		var p struct {
			Level mcp.LoggingLevel `json:"level"`
		}
		if json.Unmarshal(params, &p) != nil {
			return
		}
		line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": mcp.MethodNotificationMessage, "params": params})
		if err != nil {
			return
		}
		tools := u.Tools()
		g.routes.tell(note{line: append(line, '\n'), to: func(s *Session) bool {
			return s.wantsLog(p.Level) && slices.ContainsFunc(tools, func(t mcp.Tool) bool { return s.chain.Leaf().HasScope(t.Name) })
		}})
	})
}
