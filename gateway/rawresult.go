package gateway

import (
	"context"
	"encoding/json"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// The receipt records the upstream's result as the upstream sent it: mcp-go's client
// returns it parsed (*mcp.CallToolResult), and re-encoding that costs a second
// marshal per call and drops what mcp-go does not model (a content field it does not
// know, for one, which an upstream signature's contentDigest covers). The transports
// below are mcp-go's own with SendRequest wrapped: the raw result of a tools/call goes
// into the slot its context carries. Embedding keeps every other method, so mcp-go
// sees the same capabilities (bidirectional requests, HTTP session, stderr).

type rawResultKey struct{}

// rawResult receives the raw JSON result of the tools/call made with its context (the
// last one, when the upstream asked for input in between).
type rawResult struct{ json json.RawMessage }

func withRawResult(ctx context.Context) (context.Context, *rawResult) {
	slot := &rawResult{}
	return context.WithValue(ctx, rawResultKey{}, slot), slot
}

func keepRawResult(ctx context.Context, req transport.JSONRPCRequest, resp *transport.JSONRPCResponse) {
	if resp == nil || resp.Error != nil || req.Method != string(mcp.MethodToolsCall) {
		return
	}
	if slot, ok := ctx.Value(rawResultKey{}).(*rawResult); ok {
		slot.json = resp.Result
	}
}

// rawStdio is mcp-go's stdio transport keeping tools/call results.
type rawStdio struct{ *transport.Stdio }

func (t rawStdio) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.Stdio.SendRequest(ctx, req)
	if err == nil {
		keepRawResult(ctx, req, resp)
	}
	return resp, err
}

// rawHTTP is mcp-go's Streamable HTTP transport keeping tools/call results.
type rawHTTP struct{ *transport.StreamableHTTP }

func (t rawHTTP) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.StreamableHTTP.SendRequest(ctx, req)
	if err == nil {
		keepRawResult(ctx, req, resp)
	}
	return resp, err
}
