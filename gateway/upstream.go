package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// Upstream is a tool provider behind the gateway.
//
// Call returns the upstream's result, including one with isError set; an error means
// the upstream threw or could not be reached (the receipt says `error`).
type Upstream interface {
	Name() string
	Tools() []mcp.Tool
	Call(ctx context.Context, tool string, args json.RawMessage, meta map[string]any) (*mcp.CallToolResult, error)
	Close() error
}

// mcpUpstream is an MCP server reached over stdio or Streamable HTTP.
type mcpUpstream struct {
	name  string
	c     *client.Client
	tools []mcp.Tool
	// child is a stdio upstream's process; with raw set, tools/call takes the fast
	// path (upstreamstdio.go), which speaks only the protocol versions before
	// 2026-07-28 (the later ones put more into every request's _meta).
	child *childProcess
	raw   bool
}

// dialMCP starts (stdio) or connects to (HTTP) an MCP upstream and lists its tools.
func dialMCP(ctx context.Context, name string, u *UpstreamConfig) (*mcpUpstream, error) {
	var c *client.Client
	var child *childProcess
	var err error
	closeAll := func() {
		c.Close()
		if child != nil {
			_ = child.stop()
		}
	}
	switch {
	case u.Command != "":
		env := make([]string, 0, len(u.Env))
		for k, v := range u.Env {
			env = append(env, k+"="+v)
		}
		sort.Strings(env)
		// client.NewStdioMCPClient, with the transport keeping raw results, over
		// pipes the tools/call fast path shares.
		var t *transport.Stdio
		if child, t, err = startChild(u.Command, env, u.Args); err == nil {
			c = client.NewClient(rawStdio{t})
		}
	default:
		var opts []transport.StreamableHTTPCOption
		if u.TokenEnv != "" {
			tok, err := configEnv("upstream "+name+": tokenEnv", u.TokenEnv)
			if err != nil {
				return nil, err
			}
			opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + tok}))
		}
		// client.NewStreamableHttpClient, with the transport keeping raw results.
		var t *transport.StreamableHTTP
		if t, err = transport.NewStreamableHTTP(u.URL, opts...); err == nil {
			c = client.NewClient(rawHTTP{t})
			err = c.Start(ctx)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", name, err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "svc-gateway", Version: "0.6.1"}
	ir, err := c.Initialize(ctx, init)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("upstream %s: initialize: %w", name, err)
	}
	res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("upstream %s: tools/list: %w", name, err)
	}
	return &mcpUpstream{name: name, c: c, tools: res.Tools, child: child, raw: child != nil && !mcp.IsModernProtocol(ir.ProtocolVersion)}, nil
}

func (u *mcpUpstream) Name() string      { return u.name }
func (u *mcpUpstream) Tools() []mcp.Tool { return u.tools }

func (u *mcpUpstream) Close() error {
	err := u.c.Close()
	if u.child != nil {
		err = errors.Join(err, u.child.stop())
	}
	return err
}

func (u *mcpUpstream) Call(ctx context.Context, tool string, args json.RawMessage, meta map[string]any) (*mcp.CallToolResult, error) {
	if u.raw {
		return u.callRaw(ctx, tool, args, meta)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	req.Params.Meta = &mcp.Meta{AdditionalFields: meta}
	res, err := u.c.CallTool(ctx, req)
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, errors.New("empty result")
	}
	if slot, ok := ctx.Value(rawResultKey{}).(*rawResult); ok && slot.parsed != nil {
		return slot.parsed, nil // parsed in one pass by the transport (rawresult.go)
	}
	return res, nil
}

// callRaw is Call over the stdio fast path: the raw result goes into the context's
// slot (rawresult.go) and is parsed once, as mcp-go's client would parse it; only its
// head when the front answers with the raw result and the content is plain text.
func (u *mcpUpstream) callRaw(ctx context.Context, tool string, args json.RawMessage, meta map[string]any) (*mcp.CallToolResult, error) {
	raw, err := u.child.call(ctx, tool, args, meta)
	if err != nil {
		return nil, err
	}
	slot, _ := ctx.Value(rawResultKey{}).(*rawResult)
	var res *mcp.CallToolResult
	var hasMeta, onePass, head bool
	if slot != nil && slot.headOnly {
		res, hasMeta, head = parseHead(raw)
		onePass = head
	}
	if !head {
		res, hasMeta, onePass = parseCallToolResult(raw)
	}
	if !onePass {
		if needsInput(raw) {
			return nil, errors.New("the upstream asked for more input (a multi round trip result), which the gateway does not give")
		}
		if res, err = mcp.ParseCallToolResult(&raw); err != nil {
			return nil, err
		}
	}
	if slot != nil {
		slot.json, slot.parsed, slot.noMeta, slot.headOnly = raw, res, onePass && !hasMeta, head
	}
	return res, nil
}

// needsInput reports whether a tools/call result asks the client for more input.
func needsInput(raw json.RawMessage) bool {
	var r struct {
		ResultType    mcp.ResultType  `json:"resultType"`
		InputRequests json.RawMessage `json:"inputRequests"`
		RequestState  json.RawMessage `json:"requestState"`
	}
	return json.Unmarshal(raw, &r) == nil && (r.ResultType == mcp.ResultTypeInputRequired || r.InputRequests != nil || r.RequestState != nil)
}
