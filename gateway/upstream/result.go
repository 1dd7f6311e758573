package upstream

import (
	"encoding/json"

	"github.com/mark3labs/mcp-go/mcp"
)

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

// parseHead is ParseCallToolResult for a result the front answers with as sent: one
// decoding of the result, returning isError, _meta and resultType (no content) and
// whether it has a member named _meta, when ParseCallToolResult would surely parse
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

// ParseCallToolResult parses a complete tools/call result into what
// mcp.ParseCallToolResult returns for it (the same decoding of each member, content
// items through mcp.UnmarshalContent) in one pass over the result, and whether it has
// a member named _meta (matched as encoding/json matches names: in any case). It
// declines (false) what it leaves to mcp-go: a result asking for input (multi round
// trip), one without content, one that does not parse.
func ParseCallToolResult(raw json.RawMessage) (*mcp.CallToolResult, bool, bool) {
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
