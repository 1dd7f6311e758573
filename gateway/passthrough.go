package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"svc.dev/svc/gateway/upstream"
)

// Pass-through (Config.PassThrough): resources, prompts and completion requests go to
// the upstream as the agent sent them and its answer comes back as sent, for a
// session whose grant names the feature as a scope. Nothing is decided and no receipt
// is issued: SPEC's enforcement covers tools. Off unless configured, and then the
// gateway's initialize answer advertises the feature.

// passThroughMethods maps each passed-through method to its feature.
var passThroughMethods = map[string]string{
	"resources/list": "resources", "resources/templates/list": "resources", "resources/read": "resources",
	"resources/subscribe": "resources", "resources/unsubscribe": "resources",
	"prompts/list": "prompts", "prompts/get": "prompts",
	"completion/complete": "completion",
}

// passThroughOptions are mcp-go's server options advertising the configured features.
func (g *Gateway) passThroughOptions() []server.ServerOption {
	var opts []server.ServerOption
	for _, f := range g.cfg.PassThrough {
		switch f {
		case "resources":
			opts = append(opts, server.WithResourceCapabilities(true, false))
		case "prompts":
			opts = append(opts, server.WithPromptCapabilities(false))
		case "completion":
			opts = append(opts, server.WithCompletions())
		}
	}
	return opts
}

// forwardFeature answers a request of a passed-through feature (false: not one, left to
// mcp-go). The answer is one line: the upstream's result or error as sent, with the
// agent's id; a feature the session's grant does not name is refused as an unknown
// method, as without pass-through.
func (g *Gateway) forwardFeature(ctx context.Context, s *Session, body []byte) ([]byte, bool) {
	env, ok := g.passThroughRequest(body)
	if !ok {
		return nil, false
	}
	return g.answerPassThrough(ctx, s, env), true
}

// passThroughRequest is body decoded when it is a request the config passes through
// (ok false otherwise: not one, or not configured).
func (g *Gateway) passThroughRequest(body []byte) (*rpcEnvelope, bool) {
	if len(g.cfg.PassThrough) == 0 {
		return nil, false
	}
	var env rpcEnvelope
	if json.Unmarshal(body, &env) != nil || env.JSONRPC != mcp.JSONRPC_VERSION || env.Result != nil || env.Error != nil || !plainID(env.ID) {
		return nil, false
	}
	feature, ok := passThroughMethods[env.Method]
	if !ok || !slices.Contains(g.cfg.PassThrough, feature) {
		return nil, false
	}
	return &env, true
}

// answerPassThrough is the answer line to a request passThroughRequest took: the
// upstream's result or error as sent, or an error naming what failed.
func (g *Gateway) answerPassThrough(ctx context.Context, s *Session, env *rpcEnvelope) []byte {
	feature := passThroughMethods[env.Method]
	if s == nil || !s.chain.Leaf().HasScope(feature) {
		return rpcErrorLine(env.ID, mcp.METHOD_NOT_FOUND, fmt.Sprintf("%s: the grant does not name %q", env.Method, feature), nil)
	}
	for _, u := range g.routes.upstreams {
		f, ok := u.(upstream.Forwarder)
		if !ok {
			continue
		}
		res, rerr, err := f.Forward(ctx, env.Method, env.Params)
		if err != nil {
			return rpcErrorLine(env.ID, mcp.INTERNAL_ERROR, fmt.Sprintf("%s: upstream %s: %v", env.Method, u.Name(), err), nil)
		}
		if rerr != nil {
			return rpcErrorLine(env.ID, 0, "", rerr)
		}
		var b bytes.Buffer
		b.WriteString(`{"jsonrpc":"2.0","id":`)
		b.Write(env.ID)
		b.WriteString(`,"result":`)
		if json.Compact(&b, res) != nil {
			return rpcErrorLine(env.ID, mcp.INTERNAL_ERROR, env.Method+": the upstream's result is not JSON", nil)
		}
		b.WriteString("}\n")
		return b.Bytes()
	}
	return rpcErrorLine(env.ID, mcp.METHOD_NOT_FOUND, env.Method+": no MCP upstream to pass it to", nil)
}

// rpcErrorLine is a JSON-RPC error answer, one line: code and message, or raw, the
// upstream's error object as sent.
func rpcErrorLine(id json.RawMessage, code int, message string, raw json.RawMessage) []byte {
	e := raw
	if e == nil {
		e, _ = json.Marshal(map[string]any{"code": code, "message": message})
	}
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(id)
	b.WriteString(`,"error":`)
	if json.Compact(&b, e) != nil {
		b.WriteString(`{"code":-32603,"message":"the upstream's error is not JSON"}`)
	}
	b.WriteString("}\n")
	return b.Bytes()
}
