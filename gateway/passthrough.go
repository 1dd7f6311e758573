package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

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
// reaches the upstreams offering it (below).
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
// (below).
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

// Pass-through with more than one upstream offering a feature (the index of what
// each lists: passindex.go):
//   - a list (resources/list, resources/templates/list, prompts/list) is the union of
//     every such upstream's list, in the config's order, each item as its upstream
//     sent it. The gateway follows each upstream's nextCursor itself (at most
//     maxPassPages pages each) and answers the whole union in one page with no
//     nextCursor; a request carrying a cursor is refused (-32602), since the gateway
//     never gave one.
//   - any other request goes to the one upstream whose latest list names what it
//     names: resources/read and resources/(un)subscribe by uri (listed as a resource,
//     else matching a listed resource template), prompts/get by name, completion/complete
//     by its ref (a prompt's name, a resource template's uri). The latest lists are
//     the gateway's index (passIndex), filled by every union it answers and listed
//     again when a request names what the index does not hold.
//   - a uri or name that more than one upstream lists is passed to neither (-32602,
//     naming them), as a tool two upstreams offer is routed to neither; one no
//     upstream lists is refused likewise.

// maxPassPages bounds the pages of one upstream's list the gateway follows.
const maxPassPages = 100

// unionLine answers a list request with the union of ups' lists (member names the
// items), and records them in the index.
func (g *Gateway) unionLine(ctx context.Context, ups []passUpstream, env *rpcEnvelope, member string, hop upstream.Hop) []byte {
	var p struct {
		Cursor *string `json:"cursor"`
	}
	if json.Unmarshal(env.Params, &p) == nil && p.Cursor != nil {
		return rpcErrorLine(env.ID, mcp.INVALID_PARAMS, fmt.Sprintf("%s: the gateway answers the union of %d upstreams' lists in one page and gave no cursor; ask without one", env.Method, len(ups)), nil)
	}
	lists, err := listEach(ctx, ups, env.Method, member, hop)
	if err != nil {
		return rpcErrorLine(env.ID, mcp.INTERNAL_ERROR, err.Error(), nil)
	}
	for kind, l := range kindLists {
		if l.method == env.Method {
			g.passed.record(kind, lists)
		}
	}
	all := []json.RawMessage{}
	for _, l := range lists {
		all = append(all, l.items...)
	}
	res, err := json.Marshal(map[string]any{member: all})
	if err != nil {
		return rpcErrorLine(env.ID, mcp.INTERNAL_ERROR, err.Error(), nil)
	}
	return resultRawLine(env.ID, res, env.Method)
}

// listEach is each upstream's whole list of method (member holding the items).
func listEach(ctx context.Context, ups []passUpstream, method, member string, hop upstream.Hop) ([]listed, error) {
	out := make([]listed, 0, len(ups))
	for _, up := range ups {
		l := listed{upstream: up.name}
		cursor := ""
		for page := 0; ; page++ {
			if page == maxPassPages {
				return nil, fmt.Errorf("%s: upstream %s: more than %d pages", method, up.name, maxPassPages)
			}
			params := json.RawMessage(`{}`)
			if cursor != "" {
				params, _ = json.Marshal(map[string]string{"cursor": cursor})
			}
			res, rerr, err := up.f.Forward(ctx, method, params, hop)
			if err == nil && rerr != nil {
				err = fmt.Errorf("error %s", rerr)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: upstream %s: %w", method, up.name, err)
			}
			items, next, err := listPage(res, member)
			if err != nil {
				return nil, fmt.Errorf("%s: upstream %s: %w", method, up.name, err)
			}
			l.items = append(l.items, items...)
			if cursor = next; cursor == "" {
				break
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// listPage is the items (in member) and the nextCursor of one page of a list.
func listPage(res json.RawMessage, member string) ([]json.RawMessage, string, error) {
	var page map[string]json.RawMessage
	if err := json.Unmarshal(res, &page); err != nil {
		return nil, "", fmt.Errorf("the result is not a JSON object: %w", err)
	}
	var items []json.RawMessage
	if raw, ok := page[member]; ok {
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, "", fmt.Errorf("%s is not an array: %w", member, err)
		}
	}
	var next string
	if raw, ok := page["nextCursor"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &next); err != nil {
			return nil, "", fmt.Errorf("nextCursor is not a string: %w", err)
		}
	}
	return items, next, nil
}

// passOwner is the upstream a request that names a resource or prompt goes to (nil:
// none, with the JSON-RPC error's code and why): the one whose latest list names
// it, the lists read again when the index names none.
func (g *Gateway) passOwner(ctx context.Context, feature string, env *rpcEnvelope, hop upstream.Hop) (*passUpstream, int, string) {
	kind, name, ok := passTarget(env.Method, env.Params)
	if !ok {
		return nil, mcp.INVALID_PARAMS, "the params name no resource uri or prompt name, which the gateway routes by among its upstreams"
	}
	listFeature := "resources"
	if kind == kindPrompt {
		listFeature = "prompts"
	}
	owners := g.passed.lookup(kind, name)
	if len(owners) == 0 {
		ups := g.offering(listFeature)
		kinds := []string{kindPrompt}
		if kind == kindResource {
			kinds = []string{kindResource, kindTemplate}
		}
		for _, k := range kinds {
			l := kindLists[k]
			lists, err := listEach(ctx, ups, l.method, l.member, hop)
			if err != nil {
				return nil, mcp.INTERNAL_ERROR, fmt.Sprintf("finding which upstream lists %s %q: %v", kind, name, err)
			}
			g.passed.record(k, lists)
		}
		owners = g.passed.lookup(kind, name)
	}
	switch {
	case len(owners) == 0:
		return nil, mcp.INVALID_PARAMS, fmt.Sprintf("no upstream lists %s %q", kind, name)
	case len(owners) > 1:
		return nil, mcp.INVALID_PARAMS, fmt.Sprintf("%s %q is listed by more than one upstream (%s); the gateway passes it to neither", kind, name, strings.Join(owners, ", "))
	}
	for _, up := range g.offering(feature) {
		if up.name == owners[0] {
			return &up, 0, ""
		}
	}
	return nil, mcp.METHOD_NOT_FOUND, fmt.Sprintf("upstream %s, which lists %s %q, does not offer %s", owners[0], kind, name, feature)
}

// passTarget is what a request names (a resource uri or a prompt name; kind
// kindResource or kindPrompt): resources/read and resources/(un)subscribe its uri,
// prompts/get its name, completion/complete its ref.
func passTarget(method string, params json.RawMessage) (kind, name string, ok bool) {
	var p struct {
		URI  string `json:"uri"`
		Name string `json:"name"`
		Ref  struct {
			Type string `json:"type"`
			URI  string `json:"uri"`
			Name string `json:"name"`
		} `json:"ref"`
	}
	if json.Unmarshal(params, &p) != nil {
		return "", "", false
	}
	switch {
	case method == "prompts/get":
		kind, name = kindPrompt, p.Name
	case method == "completion/complete" && p.Ref.Type == "ref/prompt":
		kind, name = kindPrompt, p.Ref.Name
	case method == "completion/complete" && p.Ref.Type == "ref/resource":
		kind, name = kindResource, p.Ref.URI
	case strings.HasPrefix(method, "resources/"):
		kind, name = kindResource, p.URI
	}
	return kind, name, name != ""
}
