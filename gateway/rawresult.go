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
// last one, when the upstream asked for input in between), and that result parsed in
// one pass (nil when parseCallToolResult left it to mcp-go).
type rawResult struct {
	json   json.RawMessage
	parsed *mcp.CallToolResult
	noMeta bool // the result has no member named _meta in any case (known when parsed)
	// headOnly: the front answers with json, so parsed may hold only what the call
	// path reads (isError, _meta, resultType), without the content (parseHead).
	headOnly bool
}

// answersRawKey marks the context of a call whose front answers the agent with the
// upstream's raw result (the stdio fast path).
type answersRawKey struct{}

func withRawResult(ctx context.Context) (context.Context, *rawResult) {
	slot := &rawResult{headOnly: ctx.Value(answersRawKey{}) != nil}
	return context.WithValue(ctx, rawResultKey{}, slot), slot
}

// full is the result parsed in full: the slot's parse, or the content too when the
// slot held only its head.
func (r *rawResult) full() (*mcp.CallToolResult, error) {
	if r.parsed != nil && r.parsed.Content != nil {
		return r.parsed, nil
	}
	if res, _, ok := parseCallToolResult(r.json); ok {
		return res, nil
	}
	raw := r.json
	return mcp.ParseCallToolResult(&raw)
}

// resultHead is a tools/call result as parseHead decodes it: the members the call
// path reads, and of each content item what shows it is plain text.
type resultHead struct {
	Meta              json.RawMessage `json:"_meta"`
	ResultType        mcp.ResultType  `json:"resultType"`
	Content           []contentHead   `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
	InputRequests     json.RawMessage `json:"inputRequests"`
	RequestState      json.RawMessage `json:"requestState"`
}

type contentHead struct {
	Type        json.RawMessage `json:"type"`
	Text        json.RawMessage `json:"text"`
	Annotations json.RawMessage `json:"annotations"`
	Meta        json.RawMessage `json:"_meta"`
}

// parseHead is parseCallToolResult for a result the front answers with as sent: one
// decoding of the result, returning isError, _meta and resultType (no content) and
// whether it has a member named _meta, when parseCallToolResult would surely parse
// it (FuzzParseHead): every content item plain text (type "text", a string text, no
// annotations or _meta, which TextContent always decodes), structured content whose
// numbers surely fit a float64 (the full parse decodes it into an any). False: parse
// it in full. raw is valid JSON (decoded or checked when it was read): a result of
// the usual shape is scanned (scanHead), not decoded.
func parseHead(raw json.RawMessage) (*mcp.CallToolResult, bool, bool) {
	if res, hasMeta, ok := scanHead(raw); ok {
		return res, hasMeta, true
	}
	return decodeHead(raw)
}

// decodeHead is parseHead by decoding the result.
func decodeHead(raw json.RawMessage) (*mcp.CallToolResult, bool, bool) {
	var r resultHead
	if json.Unmarshal(raw, &r) != nil || r.Content == nil || r.ResultType == mcp.ResultTypeInputRequired ||
		r.InputRequests != nil || r.RequestState != nil || !numbersFitFloat(r.StructuredContent) {
		return nil, false, false
	}
	for _, c := range r.Content {
		if string(c.Type) != `"text"` || len(c.Text) == 0 || c.Text[0] != '"' || c.Annotations != nil || c.Meta != nil {
			return nil, false, false
		}
	}
	res := &mcp.CallToolResult{IsError: r.IsError}
	res.ResultType = r.ResultType
	if r.Meta != nil && string(r.Meta) != "null" {
		res.Meta = &mcp.Meta{}
		if json.Unmarshal(r.Meta, res.Meta) != nil {
			return nil, false, false
		}
	}
	return res, r.Meta != nil, true
}

func keepRawResult(ctx context.Context, req transport.JSONRPCRequest, resp *transport.JSONRPCResponse) {
	if resp == nil || resp.Error != nil || req.Method != string(mcp.MethodToolsCall) {
		return
	}
	slot, ok := ctx.Value(rawResultKey{}).(*rawResult)
	if !ok {
		return
	}
	slot.json, slot.parsed, slot.noMeta = resp.Result, nil, false
	if res, hasMeta, ok := parseCallToolResult(resp.Result); ok {
		// mcp-go's own parse (ParseCallToolResult) decodes the result twice and
		// validates it three times (its content a fourth); it now parses a stub,
		// and mcpUpstream.Call returns this parse instead (nothing else reads what
		// the client returns for a call made with a slot).
		slot.parsed, slot.noMeta = res, !hasMeta
		resp.Result = parsedStub
	}
}

// parsedStub is the smallest result mcp-go's client parses as a complete one.
var parsedStub = json.RawMessage(`{"content":[]}`)

// parseCallToolResult parses a complete tools/call result into what
// mcp.ParseCallToolResult returns for it (the same decoding of each member, content
// items through mcp.UnmarshalContent) in one pass over the result, and whether it has
// a member named _meta (matched as encoding/json matches names: in any case). It
// declines (false) what it leaves to mcp-go: a result asking for input (multi round
// trip), one without content, one that does not parse.
func parseCallToolResult(raw json.RawMessage) (*mcp.CallToolResult, bool, bool) {
	var r struct {
		Meta              json.RawMessage   `json:"_meta,omitempty"`
		ResultType        mcp.ResultType    `json:"resultType,omitempty"`
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent,omitempty"`
		IsError           bool              `json:"isError,omitempty"`
		InputRequests     json.RawMessage   `json:"inputRequests,omitempty"`
		RequestState      json.RawMessage   `json:"requestState,omitempty"`
	}
	if json.Unmarshal(raw, &r) != nil || r.Content == nil || r.ResultType == mcp.ResultTypeInputRequired ||
		r.InputRequests != nil || r.RequestState != nil {
		return nil, false, false
	}
	res := &mcp.CallToolResult{IsError: r.IsError}
	res.ResultType = r.ResultType
	if r.Meta != nil && string(r.Meta) != "null" { // a null _meta leaves Meta nil, as in mcp-go's parse
		res.Meta = &mcp.Meta{}
		if json.Unmarshal(r.Meta, res.Meta) != nil {
			return nil, false, false
		}
	}
	if len(r.Content) > 0 {
		res.Content = make([]mcp.Content, len(r.Content))
		for i, item := range r.Content {
			c, err := mcp.UnmarshalContent(item)
			if err != nil {
				return nil, false, false
			}
			res.Content[i] = c
		}
	}
	if len(r.StructuredContent) > 0 {
		res.RawStructuredContent = r.StructuredContent
		if json.Unmarshal(r.StructuredContent, &res.StructuredContent) != nil {
			return nil, false, false
		}
	}
	return res, r.Meta != nil, true
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

// numbersFitFloat reports, conservatively, that every number in a valid JSON value
// fits a float64, which encoding/json decodes it into: no number has an exponent or
// more than 300 digits (a larger one could overflow).
func numbersFitFloat(v json.RawMessage) bool {
	inString, escaped, digits := false, false, 0
	for _, c := range v {
		switch {
		case inString:
			if escaped {
				escaped = false
			} else if c == '\\' {
				escaped = true
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c >= '0' && c <= '9':
			if digits++; digits > 300 {
				return false
			}
			continue
		case (c == 'e' || c == 'E') && digits > 0:
			return false
		}
		digits = 0
	}
	return true
}
