package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// SPEC: tools/list returns the upstreams' tools filtered to the grant, unchanged. So
// an MCP upstream's tools are kept as it sent them (RawTools), every member of each
// tool and of its schemas included, and the fronts answer tools/list with those;
// mcp-go's Tool, which keeps only some members of a schema, serves the call path
// (names) and mcp-go's own server.

// maxToolPages bounds the pages of one tools/list.
const maxToolPages = 100

// listTools lists the upstream's tools, every page, each as sent and parsed. It asks
// through the transport (mcp-go's client would return them parsed only), with ids of
// its own that the client's never are; an upstream that refuses such a request (a
// revision that wants more in every request) is asked through the client, and its
// tools are then mcp-go's encoding (raw nil). On the 2026-07-28 revision, whose every
// request carries the protocol's keys in _meta (which mcp-go's client adds, and
// without which a server may take the connection for an earlier revision's), it asks
// through the client, whose transport keeps the result as sent (keepRawResult).
func listTools(ctx context.Context, c *client.Client) ([]mcp.Tool, []json.RawMessage, error) {
	var tools []mcp.Tool
	var raws []json.RawMessage
	cursor := ""
	for page := 0; page < maxToolPages; page++ {
		result, err := listPage(ctx, c, page, cursor)
		if err != nil {
			res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil {
				return nil, nil, err
			}
			return res.Tools, nil, nil
		}
		var res struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := json.Unmarshal(result, &res); err != nil {
			return nil, nil, fmt.Errorf("the tools/list result: %w", err)
		}
		for _, raw := range res.Tools {
			var t mcp.Tool
			if err := json.Unmarshal(raw, &t); err != nil {
				return nil, nil, fmt.Errorf("a tool of tools/list: %w", err)
			}
			tools, raws = append(tools, t), append(raws, raw)
		}
		if cursor = res.NextCursor; cursor == "" {
			return tools, raws, nil
		}
	}
	return nil, nil, fmt.Errorf("tools/list: more than %d pages", maxToolPages)
}

// listPage is one page of tools/list as the upstream sent it.
func listPage(ctx context.Context, c *client.Client, page int, cursor string) (json.RawMessage, error) {
	if mcp.IsModernProtocol(c.ProtocolVersion()) {
		ctx, slot := withRawSlot(ctx)
		slot.list = true
		req := mcp.ListToolsRequest{}
		req.Params.Cursor = mcp.Cursor(cursor)
		if _, err := c.ListToolsByPage(ctx, req); err != nil {
			return nil, err
		}
		if slot.json == nil {
			return nil, errors.New("the transport kept no tools/list result")
		}
		return slot.json, nil
	}
	req := transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(fmt.Sprintf("svc-tools-list-%d", page)), Method: string(mcp.MethodToolsList)}
	if cursor != "" {
		req.Params = map[string]any{"cursor": cursor}
	}
	resp, err := c.GetTransport().SendRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, resp.Error.AsError()
	}
	return resp.Result, nil
}

// RawTools is each of an upstream's tools as the upstream sent it, in Tools' order:
// an MCP upstream's as listed (mcp-go's encoding when the upstream refused the raw
// listing), a REST upstream's as the gateway makes them.
func RawTools(u Upstream) []json.RawMessage {
	if m, ok := u.(*mcpUpstream); ok {
		if l := m.list.Load(); l.raws != nil {
			return l.raws
		}
	}
	var out []json.RawMessage
	for _, t := range u.Tools() {
		b, err := json.Marshal(t)
		if err != nil {
			continue
		}
		out = append(out, b)
	}
	return out
}

// Forwarder passes one request of a feature besides tools (resources, prompts,
// completion) to an MCP upstream as sent, and returns its result or its JSON-RPC
// error as sent; err is a failure to get either. Offers reports whether the upstream
// declared the feature ("resources", "prompts", "completion") in its capabilities.
type Forwarder interface {
	Forward(ctx context.Context, method string, params json.RawMessage, hop Hop) (result, rpcErr json.RawMessage, err error)
	Offers(feature string) bool
}

// Hop is what the agent's side adds to a request toward an upstream on the
// 2026-07-28 revision, whose every request declares it in _meta: the client
// capabilities the agent declared (JSON; nil: the gateway's own) and the log level
// the agent asked for ("": none, so the upstream sends no log messages for it).
type Hop struct {
	Capabilities json.RawMessage
	LogLevel     mcp.LoggingLevel
}

// forwards numbers the requests Forward sends (ids of its own, never the client's).
var forwards atomic.Int64

// Forward implements Forwarder through the client's transport, within the call
// timeout. Each hop its own revision: the agent's io.modelcontextprotocol/ keys are
// taken out of the params' _meta, and toward an upstream on the 2026-07-28 revision
// the ones of the gateway's hop put in (hopParams), with the headers that revision
// wants over HTTP, as mcp-go's client does for the requests it makes.
func (u *mcpUpstream) Forward(ctx context.Context, method string, params json.RawMessage, hop Hop) (json.RawMessage, json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, u.timeout)
	defer cancel()
	req := transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(fmt.Sprintf("svc-fwd-%d", forwards.Add(1))), Method: method}
	var modern *hopMeta
	if u.modern {
		modern = &hopMeta{version: u.c.ProtocolVersion(), caps: hop.Capabilities, level: hop.LogLevel}
		if modern.caps == nil {
			modern.caps, _ = json.Marshal(u.c.GetClientCapabilities())
		}
	}
	params, err := hopParams(params, modern)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", method, err)
	}
	if len(params) > 0 && string(params) != "null" {
		req.Params = params
	}
	if modern != nil {
		req.Header = http.Header{}
		for k, v := range mcp.StandardHeaders(modern.version, mcp.MCPMethod(method), params) {
			req.Header.Set(k, v)
		}
	}
	resp, err := u.c.GetTransport().SendRequest(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	if resp.Error != nil {
		b, err := json.Marshal(resp.Error)
		return nil, b, err
	}
	return resp.Result, nil, nil
}

// Offers implements Forwarder from the capabilities the upstream declared.
func (u *mcpUpstream) Offers(feature string) bool {
	switch feature {
	case "resources":
		return u.caps.Resources != nil
	case "prompts":
		return u.caps.Prompts != nil
	case "completion":
		return u.caps.Completions != nil
	}
	return false
}

// hopMeta is the gateway's hop toward an upstream on the 2026-07-28 revision, as
// the _meta of each request declares it.
type hopMeta struct {
	version string
	caps    json.RawMessage
	level   mcp.LoggingLevel
}

// hopParams is a forwarded request's params with the agent's io.modelcontextprotocol/
// _meta keys taken out and, with modern set, the gateway's hop's put in (its
// revision, its client's identity, the agent's capabilities and log level). Params
// with no such key toward an earlier revision are returned as sent.
func hopParams(params json.RawMessage, modern *hopMeta) (json.RawMessage, error) {
	if modern == nil && !bytes.Contains(params, []byte(protocolKeyPrefix)) {
		return params, nil
	}
	fields := map[string]json.RawMessage{}
	if len(params) > 0 && string(params) != "null" {
		if err := json.Unmarshal(params, &fields); err != nil {
			return nil, fmt.Errorf("params are not a JSON object: %w", err)
		}
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := fields["_meta"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, fmt.Errorf("_meta is not a JSON object: %w", err)
		}
	}
	for k := range meta {
		if strings.HasPrefix(k, protocolKeyPrefix) {
			delete(meta, k)
		}
	}
	if modern != nil {
		meta[mcp.MetaKeyProtocolVersion], _ = json.Marshal(modern.version)
		meta[mcp.MetaKeyClientInfo], _ = json.Marshal(ClientInfo)
		meta[mcp.MetaKeyClientCapabilities] = modern.caps
		if modern.level != "" {
			meta[mcp.MetaKeyLogLevel], _ = json.Marshal(modern.level)
		}
	}
	delete(fields, "_meta")
	if len(meta) > 0 {
		b, err := json.Marshal(meta)
		if err != nil {
			return nil, err
		}
		fields["_meta"] = b
	}
	return json.Marshal(fields)
}

// protocolKeyPrefix begins the _meta keys the protocol itself defines, which belong
// to one hop (its revision, its client).
const protocolKeyPrefix = "io.modelcontextprotocol/"

// ClientInfo is the gateway's identity as a client of its upstreams.
var ClientInfo = mcp.Implementation{Name: "svc-gateway", Version: "0.6.1"}

// toolList is an MCP upstream's tools as one listing returned them: parsed, and as
// sent (raws, in tools' order; nil when the upstream refused the raw listing).
type toolList struct {
	tools []mcp.Tool
	raws  []json.RawMessage
}

// WatchTools has changed called, on a goroutine of its own, each time the upstream
// says its tools changed (notifications/tools/list_changed: from a stdio upstream, or
// on any stream of a Streamable HTTP upstream). False: the upstream cannot say
// so (a REST upstream).
func WatchTools(u Upstream, changed func()) bool {
	m, ok := u.(*mcpUpstream)
	if !ok {
		return false
	}
	m.toolsChanged.set(changed)
	if m.http != nil {
		m.http.toolsChanged.set(changed)
	}
	return true
}

// WatchLogs has logged given the params of each notifications/message the upstream
// sends that no call owns: every one from a stdio upstream (its output names no
// call) or from one on the 2026-07-28 revision. It runs on the reader of the
// upstream's output, so it must not block. False: the upstream's log messages go to
// the call whose stream carried them (Call.Notify; Streamable HTTP), or it sends
// none (REST).
func WatchLogs(u Upstream, logged func(params json.RawMessage)) bool {
	m, ok := u.(*mcpUpstream)
	if !ok || m.http != nil {
		return false
	}
	m.logs.Store(&logged)
	return true
}

// toolsWatch holds the func WatchTools was given.
type toolsWatch struct{ f atomic.Pointer[func()] }

func (w *toolsWatch) set(f func()) { w.f.Store(&f) }

// fire runs the watcher, if any, on a goroutine of its own.
func (w *toolsWatch) fire() {
	if f := w.f.Load(); f != nil {
		go (*f)()
	}
}

// Relist lists an MCP upstream's tools again and, when they differ from the last
// listing (as sent, byte for byte), keeps the new ones: Tools and RawTools return
// them from then on. It reports whether they changed; a REST upstream's never do.
func Relist(ctx context.Context, u Upstream) (bool, error) {
	m, ok := u.(*mcpUpstream)
	if !ok {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	tools, raws, err := listTools(ctx, m.c)
	if err != nil {
		return false, fmt.Errorf("upstream %s: tools/list: %w", m.name, err)
	}
	old := m.list.Load()
	if sameRaws(old.raws, raws) && len(old.tools) == len(tools) && (raws != nil || reflect.DeepEqual(old.tools, tools)) {
		return false, nil
	}
	m.list.Store(&toolList{tools: tools, raws: raws})
	return true, nil
}

func sameRaws(a, b []json.RawMessage) bool {
	return slices.EqualFunc(a, b, func(x, y json.RawMessage) bool { return bytes.Equal(x, y) })
}
