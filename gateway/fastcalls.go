package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway/upstream"
)

// What the stdio and Streamable HTTP fronts' tools/call fast paths share: the calls
// in flight on a session, which notifications/cancelled can reach, and the answer
// to one call.

// inflightCalls are the fast path's calls in flight on one session, by the request
// id as mcp-go keys it (cancelKey), so that a notifications/cancelled naming one
// cancels its call, as mcp-go cancels the requests it serves.
type inflightCalls struct {
	mu sync.Mutex
	m  map[string]*context.CancelFunc
}

// start registers a call and returns its context, cancelled by a cancellation
// naming id, and the function that ends it (always called).
func (c *inflightCalls) start(ctx context.Context, id json.RawMessage) (context.Context, func()) {
	cctx, cancel := context.WithCancel(ctx)
	key, token := cancelKey(id), &cancel
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*context.CancelFunc{}
	}
	c.m[key] = token // a second call with the same id takes over the key
	c.mu.Unlock()
	return cctx, func() {
		c.mu.Lock()
		if c.m[key] == token {
			delete(c.m, key)
		}
		c.mu.Unlock()
		cancel()
	}
}

// noteCancel cancels the fast-path call a notifications/cancelled message names, if
// any; the message still goes to mcp-go, for the requests it serves.
func (c *inflightCalls) noteCancel(msg []byte) {
	var n struct {
		Method string `json:"method"`
		Params struct {
			RequestID json.RawMessage `json:"requestId"`
		} `json:"params"`
	}
	if !bytes.Contains(msg, []byte(mcp.MethodNotificationCancelled)) || json.Unmarshal(msg, &n) != nil ||
		n.Method != string(mcp.MethodNotificationCancelled) || n.Params.RequestID == nil {
		return
	}
	key := cancelKey(n.Params.RequestID)
	c.mu.Lock()
	cancel := c.m[key]
	c.mu.Unlock()
	if cancel != nil {
		(*cancel)()
	}
}

// cancelKey is a request id as notifications/cancelled names it, decoded as mcp-go
// decodes both (a Go value, printed).
func cancelKey(id json.RawMessage) string {
	var v any
	_ = json.Unmarshal(id, &v)
	return fmt.Sprint(v)
}

// answerCall runs the call path for one fast-path request of session s and returns
// the JSON-RPC answer, newline ended (resultLine); a panic is answered as mcp-go
// answers one. ask, when set, relays to the agent what the upstream asks within the
// call (upstream.Call's Ask).
func (g *Gateway) answerCall(ctx context.Context, log *slog.Logger, s *Session, req *toolCallRequest,
	ask func(context.Context, string, json.RawMessage) (json.RawMessage, error)) (line []byte) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("panic recovered in a tool call", "panic", r)
			line = errorLine(req.id, mcp.INTERNAL_ERROR, fmt.Sprintf("internal panic: %v", r))
		}
	}()
	g.fastCalls.Add(1)
	res, raw := g.runCallWith(ctx, s, req.name, requestArgsRaw(req.args), req.meta, true, upstream.Call{Ask: ask})
	return resultLine(req.id, res, raw)
}

// requestArgsRaw is requestArgs for a decoded request: the raw arguments (mcp-go's
// RawArguments) when present.
func requestArgsRaw(args json.RawMessage) json.RawMessage {
	if len(args) == 0 {
		return nil
	}
	return args
}

// resultLine is the answer to a request: the upstream's raw result with the receipt's
// id in its _meta when the call returned one, else res as mcp-go encodes it.
func resultLine(id json.RawMessage, res *mcp.CallToolResult, raw *upstream.Result) []byte {
	if raw != nil && res.Meta != nil {
		if rid, ok := res.Meta.AdditionalFields[MetaReceipt].(string); ok {
			if b, ok := withReceiptMeta(raw.Raw, rid, raw.NoMeta); ok {
				return appendResultLine(make([]byte, 0, len(b)+len(id)+32), id, b)
			}
		}
	}
	if raw != nil && raw.HeadOnly {
		if full, err := raw.Full(); err == nil { // res holds only the head
			res.Content, res.StructuredContent = full.Content, full.StructuredContent
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return errorLine(id, mcp.INTERNAL_ERROR, fmt.Sprintf("encoding the result: %v", err))
	}
	return appendResultLine(make([]byte, 0, len(b)+len(id)+32), id, b)
}

// errorLine is a JSON-RPC error answer as mcp-go writes one.
func errorLine(id json.RawMessage, code int, message string) []byte {
	var v any
	_ = json.Unmarshal(id, &v)
	b, _ := json.Marshal(mcp.JSONRPCError{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(v), Error: mcp.NewJSONRPCErrorDetails(code, message, nil)})
	return append(b, '\n')
}
