package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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
}

// dialMCP starts (stdio) or connects to (HTTP) an MCP upstream and lists its tools.
func dialMCP(ctx context.Context, name string, u *UpstreamConfig) (*mcpUpstream, error) {
	var c *client.Client
	var err error
	switch {
	case u.Command != "":
		env := make([]string, 0, len(u.Env))
		for k, v := range u.Env {
			env = append(env, k+"="+v)
		}
		sort.Strings(env)
		// client.NewStdioMCPClient, with the transport keeping raw results.
		t := transport.NewStdio(u.Command, env, u.Args...)
		if err = t.Start(context.Background()); err == nil {
			c = client.NewClient(rawStdio{t})
		}
	default:
		var opts []transport.StreamableHTTPCOption
		if u.TokenEnv != "" {
			tok, ok := os.LookupEnv(u.TokenEnv)
			if !ok || tok == "" {
				return nil, fmt.Errorf("upstream %s: environment variable %s (named by tokenEnv) is not set", name, u.TokenEnv)
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
	if _, err := c.Initialize(ctx, init); err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream %s: initialize: %w", name, err)
	}
	res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream %s: tools/list: %w", name, err)
	}
	return &mcpUpstream{name: name, c: c, tools: res.Tools}, nil
}

func (u *mcpUpstream) Name() string      { return u.name }
func (u *mcpUpstream) Tools() []mcp.Tool { return u.tools }
func (u *mcpUpstream) Close() error      { return u.c.Close() }

func (u *mcpUpstream) Call(ctx context.Context, tool string, args json.RawMessage, meta map[string]any) (*mcp.CallToolResult, error) {
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
