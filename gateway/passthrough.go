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

// passThroughMethods maps each passed-through method to its feature and how it
// reaches the upstreams offering it (passroutes.go).
var passThroughMethods = map[string]passMethod{
	"resources/list":           {feature: "resources", list: "resources"},
	"resources/templates/list": {feature: "resources", list: "resourceTemplates"},
	"resources/read":           {feature: "resources"},
	"resources/subscribe":      {feature: "resources"},
	"resources/unsubscribe":    {feature: "resources"},
	"prompts/list":             {feature: "prompts", list: "prompts"},
	"prompts/get":              {feature: "prompts"},
	"completion/complete":      {feature: "completion"},
}

// passMethod is how a passed-through method reaches the upstreams: its feature, and
// for a list the member of its result that holds the items (whose union the gateway
// answers); "" for a request that goes to the one upstream that listed what it names.
type passMethod struct {
	feature, list string
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
	m, ok := passThroughMethods[env.Method]
	if !ok || !slices.Contains(g.cfg.PassThrough, m.feature) {
		return nil, false
	}
	return &env, true
}

// answerPassThrough is the answer line to a request passThroughRequest took: the
// upstream's result or error as sent, or an error naming what failed. With one
// upstream offering the feature the request goes to it; with more, a list is their
// union and any other request goes to the upstream that listed what it names
// (passroutes.go).
func (g *Gateway) answerPassThrough(ctx context.Context, s *Session, env *rpcEnvelope) []byte {
	m := passThroughMethods[env.Method]
	if s == nil || !s.chain.Leaf().HasScope(m.feature) {
		return rpcErrorLine(env.ID, mcp.METHOD_NOT_FOUND, fmt.Sprintf("%s: the grant does not name %q", env.Method, m.feature), nil)
	}
	ups := g.offering(m.feature)
	hop := s.hop(paramsMeta(env.Params))
	switch {
	case len(ups) == 0:
		return rpcErrorLine(env.ID, mcp.METHOD_NOT_FOUND, fmt.Sprintf("%s: no MCP upstream offers %s", env.Method, m.feature), nil)
	case len(ups) == 1:
		return forwardLine(ctx, ups[0], env, hop)
	case m.list != "":
		return g.unionLine(ctx, ups, env, m.list, hop)
	}
	up, code, why := g.passOwner(ctx, m.feature, env, hop)
	if up == nil {
		return rpcErrorLine(env.ID, code, env.Method+": "+why, nil)
	}
	return forwardLine(ctx, *up, env, hop)
}

// offering is the MCP upstreams that declared feature, in the config's order.
func (g *Gateway) offering(feature string) []passUpstream {
	var ups []passUpstream
	for _, u := range g.routes.upstreams {
		if f, ok := u.(upstream.Forwarder); ok && f.Offers(feature) {
			ups = append(ups, passUpstream{name: u.Name(), f: f})
		}
	}
	return ups
}

// passUpstream is an upstream that passed-through requests may reach.
type passUpstream struct {
	name string
	f    upstream.Forwarder
}

// forwardLine is the answer line to env from up: its result or error as sent, with
// the agent's id.
func forwardLine(ctx context.Context, up passUpstream, env *rpcEnvelope, hop upstream.Hop) []byte {
	res, rerr, err := up.f.Forward(ctx, env.Method, env.Params, hop)
	if err != nil {
		return rpcErrorLine(env.ID, mcp.INTERNAL_ERROR, fmt.Sprintf("%s: upstream %s: %v", env.Method, up.name, err), nil)
	}
	if rerr != nil {
		return rpcErrorLine(env.ID, 0, "", rerr)
	}
	return resultRawLine(env.ID, res, env.Method)
}

// resultRawLine is a JSON-RPC result answer, one line, the result as given.
func resultRawLine(id, res json.RawMessage, method string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(id)
	b.WriteString(`,"result":`)
	if json.Compact(&b, res) != nil {
		return rpcErrorLine(id, mcp.INTERNAL_ERROR, method+": the upstream's result is not JSON", nil)
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// paramsMeta is the _meta of a request's params (nil when there is none).
func paramsMeta(params json.RawMessage) map[string]any {
	var p struct {
		Meta map[string]any `json:"_meta"`
	}
	_ = json.Unmarshal(params, &p)
	return p.Meta
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
