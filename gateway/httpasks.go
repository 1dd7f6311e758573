package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway/upstream"
)

// The HTTP front's own requests to an agent (httpFront.serveEventStream serves the
// session's standalone stream, not mcp-go): a relayed sampling/createMessage or
// roots/list goes to the agent as an event on that stream (and any request a
// fast-path call relays, on that call's own stream: callStream), and the agent's answer,
// a POST of a JSON-RPC response naming the request's id, comes back here before
// mcp-go sees it. (mcp-go sends elicitation on the call's own stream, which it
// still does; its sampling needs its own standalone stream, which the gateway's
// replaces.)

// agentAsks is a session's requests to its agent in flight and the events waiting
// for its stream.
type agentAsks struct {
	events  chan []byte // JSON-RPC requests for the session's stream
	mu      sync.Mutex
	pending map[string]chan json.RawMessage // by request id (a JSON string)
	open    atomic.Int32                    // streams open on the session
}

var askIDs atomic.Int64

type askerKey struct{}

func newAgentAsks() *agentAsks {
	return &agentAsks{events: make(chan []byte, 16), pending: map[string]chan json.RawMessage{}}
}

// ask sends method to the agent on the session's stream and waits for its answer.
func (a *agentAsks) ask(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if a.open.Load() == 0 {
		return nil, errors.New("the agent has no event stream open (GET /mcp) on which to ask it")
	}
	return a.askVia(ctx, method, params, func(msg []byte) error {
		select {
		case a.events <- msg:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// askVia sends method to the agent with send (the session's stream, or a call's own:
// callStream) and waits for its answer, which the agent POSTs (answer).
func (a *agentAsks) askVia(ctx context.Context, method string, params json.RawMessage, send func(msg []byte) error) (json.RawMessage, error) {
	id, _ := json.Marshal(fmt.Sprintf("svc-ask-%d", askIDs.Add(1)))
	msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	ch := make(chan json.RawMessage, 1)
	a.mu.Lock()
	a.pending[string(id)] = ch
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.pending, string(id))
		a.mu.Unlock()
	}()
	if err := send(msg); err != nil {
		return nil, err
	}
	select {
	case resp := <-ch:
		var r struct {
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int             `json:"code"`
				Message string          `json:"message"`
				Data    json.RawMessage `json:"data"`
			} `json:"error"`
		}
		if err := json.Unmarshal(resp, &r); err != nil {
			return nil, err
		}
		if r.Error != nil {
			return nil, upstream.NewRPCError(r.Error.Code, r.Error.Message, r.Error.Data)
		}
		return r.Result, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// answer delivers a POSTed JSON-RPC response to the ask it names (false: none, or
// no ask is out, which it checks before decoding the body).
func (a *agentAsks) answer(body []byte) bool {
	a.mu.Lock()
	waiting := len(a.pending)
	a.mu.Unlock()
	if waiting == 0 {
		return false // no ask out: every POST (each tools/call) skips the decode
	}
	var env rpcEnvelope
	if json.Unmarshal(body, &env) != nil || env.Method != "" || (env.Result == nil && env.Error == nil) || len(env.ID) == 0 {
		return false
	}
	a.mu.Lock()
	ch := a.pending[string(env.ID)]
	delete(a.pending, string(env.ID))
	a.mu.Unlock()
	if ch == nil {
		return false
	}
	ch <- body
	return true
}

// askerFrom is the HTTP session's asker in ctx (nil on stdio, where mcp-go's server
// asks).
func askerFrom(ctx context.Context) *agentAsks {
	a, _ := ctx.Value(askerKey{}).(*agentAsks)
	return a
}

// askedByFront reports whether the front asks method itself when it can.
func askedByFront(method string) bool {
	return method == string(mcp.MethodSamplingCreateMessage) || method == string(mcp.MethodListRoots)
}
