// Package upstream is the gateway's side toward its tool providers: an MCP server
// over stdio (a child process) or Streamable HTTP, or a plain HTTP API described as
// tools (REST). Dial connects one from its config; Upstream.Call forwards one
// tools/call and returns its Result: the result parsed, and, from an MCP upstream,
// the result as the upstream sent it, which the receipt records and a fast front
// answers the agent with.
//
// Files: upstream.go (the interface, Dial, Result), mcp.go (an MCP upstream through
// mcp-go's client, its transport keeping raw results; an upstream on the 2026-07-28
// revision, whose input_required results are relayed per request), child.go (a stdio upstream's
// process and its tools/call fast path), result.go (the one-pass and head-only parses
// of a raw result), scan.go (the upstream's answer line and its result's head read
// without decoding), rest.go (a REST upstream), config.go (the config and Env),
// httpcall.go (a Streamable HTTP upstream's tools/call, what its streams send handed
// to the call), tools.go (the tools as the upstream sent them; Forward).
package upstream

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// Upstream is a tool provider behind the gateway.
//
// Call returns the upstream's result, including one with isError set; an error means
// the upstream threw or could not be reached (the receipt says `error`).
type Upstream interface {
	Name() string
	Tools() []mcp.Tool
	Call(ctx context.Context, c Call) (*Result, error)
	Close() error
}

// Call is one tools/call as the gateway forwards it.
type Call struct {
	Tool string
	Args json.RawMessage
	Meta map[string]any // the request's _meta
	// HeadOnly: the front answers the agent with the raw result, so Result.Parsed may
	// hold only what the call path reads (isError, _meta, resultType) when its content
	// is plain text (parseHead).
	HeadOnly bool
	// Notify, when set, receives each notification the upstream sends within the
	// call (notifications/progress for Meta's progressToken, notifications/message),
	// params as sent. Nil: they are dropped.
	Notify func(method string, params json.RawMessage)
	// Ask, when set, answers a request the upstream makes within the call
	// (sampling/createMessage, elicitation/create, roots/list) by relaying it to the
	// agent; its result goes back to the upstream as sent, an error from
	// NewRPCError as that JSON-RPC error. Nil: such requests get method-not-found.
	Ask func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
	// InputResponses and RequestState are the agent's retry of a call whose upstream
	// answered input_required (2026-07-28), forwarded as sent to an upstream on that
	// revision; nil on a first call.
	InputResponses json.RawMessage
	RequestState   json.RawMessage
	// Capabilities are the client capabilities the agent declared (JSON), declared in
	// turn to an upstream on the 2026-07-28 revision in the request's _meta, where
	// they decide what it may ask for; nil: the gateway's own (none).
	Capabilities json.RawMessage
	// LogLevel is the log level the agent asked for, declared in turn to an upstream
	// on the 2026-07-28 revision in the request's _meta (which sends no log messages
	// for a request without one); "": none.
	LogLevel mcp.LoggingLevel
}

// Result is an upstream's answer to a tools/call.
//
// The receipt records the upstream's result as the upstream sent it (Raw): mcp-go's
// client returns it parsed, and re-encoding that costs a second marshal per call and
// drops what mcp-go does not model (a content field it does not know, for one, which
// an upstream signature's contentDigest covers).
type Result struct {
	// Parsed is the result as mcp-go's client parses it (only its head when
	// HeadOnly). Never nil.
	Parsed *mcp.CallToolResult
	// Raw is the result as the upstream sent it; nil when there is none (a REST
	// upstream's result is made here).
	Raw json.RawMessage
	// NoMeta: Raw has no member named _meta in any case (known when it was parsed
	// in one pass).
	NoMeta bool
	// HeadOnly: Parsed holds only the head of Raw, without the content (Full parses
	// the rest).
	HeadOnly bool
}

// Full is the result parsed in full: Parsed, or, when it holds only the head, Raw
// parsed again with its content.
func (r *Result) Full() (*mcp.CallToolResult, error) {
	if r.Parsed != nil && r.Parsed.Content != nil {
		return r.Parsed, nil
	}
	if res, _, ok := ParseCallToolResult(r.Raw); ok {
		return res, nil
	}
	raw := r.Raw
	return mcp.ParseCallToolResult(&raw)
}

// DefaultCallTimeout bounds one tools/call to an MCP upstream when its config sets no
// timeoutMs: past it the call is an upstream error (SPEC's `Upstream error: …`) with
// an error receipt, and the upstream is told the call was cancelled.
const DefaultCallTimeout = 120 * time.Second

// Dial connects the upstream u describes: a REST description is served at once; an
// MCP server is started (stdio) or connected to (HTTP) and its tools listed, within
// 60 seconds.
func Dial(ctx context.Context, u *Config) (Upstream, error) {
	if u.Rest != nil {
		return newRestUpstream(u.Name, u.Rest)
	}
	dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	up, err := dialMCP(dctx, u.Name, u)
	if err != nil {
		return nil, err
	}
	up.timeout = DefaultCallTimeout
	if u.TimeoutMs > 0 {
		up.timeout = time.Duration(u.TimeoutMs) * time.Millisecond
	}
	return up, nil
}
