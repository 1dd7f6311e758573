package gateway

import (
	"bytes"
	"encoding/json"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway/upstream"
)

// tools/list is answered by the gateway itself on both fronts, before mcp-go: with
// each granted tool as its upstream sent it (upstream.RawTools), byte for byte, since
// SPEC has tools/list return the upstreams' tools "unchanged" and mcp-go's Tool keeps
// only some members of a schema (no $schema, title, oneOf, anyOf, allOf, if/then/else
// ...) and adds "required":[] and "annotations":{}. A request this does not take
// (a cursor, the stateless revision's, an id mcp-go would not echo as sent) goes to
// mcp-go, whose answer is filtered by the grant too.

// decodeToolsList reads a plain tools/list request and returns its id (false: not
// one this answers).
func decodeToolsList(body []byte) (json.RawMessage, bool) {
	if !bytes.Contains(body, []byte(`tools/list`)) {
		return nil, false
	}
	var env rpcEnvelope
	if json.Unmarshal(body, &env) != nil || env.JSONRPC != mcp.JSONRPC_VERSION || env.Method != string(mcp.MethodToolsList) ||
		env.Result != nil || env.Error != nil || !plainID(env.ID) {
		return nil, false
	}
	if env.Params != nil && string(env.Params) != "null" {
		var p struct {
			Cursor *string                    `json:"cursor"`
			Meta   map[string]json.RawMessage `json:"_meta"`
		}
		if json.Unmarshal(env.Params, &p) != nil || p.Cursor != nil {
			return nil, false
		}
		if _, ok := p.Meta[mcp.MetaKeyProtocolVersion]; ok {
			return nil, false // the stateless era's request: mcp-go's
		}
	}
	return env.ID, true
}

// toolsListLine is the answer to tools/list id for session s: every upstream's tools
// that the grant names, as sent, one line.
func (g *Gateway) toolsListLine(s *Session, id json.RawMessage) []byte {
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(id)
	b.WriteString(`,"result":{"tools":[`)
	n := 0
	for _, u := range g.routes.upstreams {
		raws := upstream.RawTools(u)
		for i, t := range u.Tools() {
			if i >= len(raws) || s == nil || !s.chain.Leaf().HasScope(t.Name) || g.routes.ownerOf(t.Name) != u {
				continue
			}
			raw := g.defs.offeredTool(t.Name, raws[i]) // under toolPins, the pinned definition
			if raw == nil {
				continue
			}
			if n > 0 {
				b.WriteByte(',')
			}
			if json.Compact(&b, raw) != nil { // one line, for stdio; nothing else changes
				continue
			}
			n++
		}
	}
	b.WriteString("]}}\n")
	return b.Bytes()
}

// ToolsFor lists the upstreams' tools the session's grant names, unchanged: as last
// listed, or under toolPins their pinned definitions (tooldefs.go).
func (g *Gateway) ToolsFor(s *Session) []mcp.Tool {
	var all []mcp.Tool
	for _, u := range g.routes.upstreams {
		for _, t := range u.Tools() {
			if g.routes.ownerOf(t.Name) == u { // not a tool two upstreams offer
				all = append(all, t)
			}
		}
	}
	return grantedTools(s, g.defs.offeredTools(all))
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
