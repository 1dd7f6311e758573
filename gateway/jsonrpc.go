package gateway

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway/internal/wire"
)

// The agent-facing fast path of tools/call (stdiofast.go): a request line is decoded
// here once, into what the call path needs, instead of the half a dozen decodings
// mcp-go's stdio server makes of it. It takes only the plain form of the request,
// where its answer is sure to be the one mcp-go would give; anything else (another
// method, a notification, a response, a task-augmented or multi-round-trip call, a
// request in the stateless protocol era, an id mcp-go would re-encode differently, a
// tool nobody offers) is left to mcp-go. FuzzDecodeToolCall holds the decoding to
// mcp-go's.

// toolCallRequest is a tools/call request the fast path takes.
type toolCallRequest struct {
	id   json.RawMessage // as sent: an integer without exponent or fraction, or a plain string
	name string
	args json.RawMessage // nil when absent
	meta map[string]any  // _meta without progressToken, as mcp-go's Meta holds it; nil when absent
}

// rpcEnvelope is the part of a JSON-RPC message the fast path looks at. Decoding it
// with encoding/json matches mcp-go's own decoding (also encoding/json): member
// names case-insensitive, the last of duplicates winning.
type rpcEnvelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// toolCallParams is mcp.CallToolParams as the fast path decodes it; the members it
// declines when present are kept raw.
type toolCallParams struct {
	Name           *string         `json:"name"`
	Arguments      json.RawMessage `json:"arguments"`
	Meta           json.RawMessage `json:"_meta"`
	Task           json.RawMessage `json:"task"`
	InputResponses json.RawMessage `json:"inputResponses"`
	RequestState   json.RawMessage `json:"requestState"`
}

// decodeToolCall decodes a line of the agent's stdin as a plain tools/call request
// (false: leave the line to mcp-go).
func decodeToolCall(line []byte) (*toolCallRequest, bool) {
	// A cheap look before any decoding: most other messages are not tools/call.
	if !bytes.Contains(line, []byte(`tools/call`)) {
		return nil, false
	}
	if req, ok := scanToolCall(line); ok {
		return req, true
	}
	var env rpcEnvelope
	if json.Unmarshal(line, &env) != nil || env.JSONRPC != mcp.JSONRPC_VERSION || env.Method != string(mcp.MethodToolsCall) ||
		env.Result != nil || env.Error != nil || !plainID(env.ID) || env.Params == nil {
		return nil, false
	}
	var p toolCallParams
	if json.Unmarshal(env.Params, &p) != nil || p.Name == nil || p.Task != nil || p.InputResponses != nil || p.RequestState != nil {
		return nil, false
	}
	req := &toolCallRequest{id: env.ID, name: *p.Name}
	if len(p.Arguments) > 0 {
		req.args = p.Arguments
	}
	if p.Meta != nil && string(p.Meta) != "null" {
		if json.Unmarshal(p.Meta, &req.meta) != nil || req.meta == nil {
			return nil, false
		}
		if _, ok := req.meta[mcp.MetaKeyProtocolVersion]; ok {
			return nil, false // the stateless era's request: mcp-go's
		}
		if _, ok := req.meta["progressToken"]; ok {
			return nil, false // progress to relay: mcp-go's (relay.go)
		}
	}
	return req, true
}

// plainID reports whether a JSON-RPC id is one mcp-go echoes byte for byte: it holds
// an id as a Go value (a number as float64) and encodes that again, so only an
// integer of at most 15 digits (exact as a float64 and written without exponent) or
// a string of printable ASCII that encoding/json writes unescaped qualifies.
func plainID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	if id[0] == '"' {
		if len(id) < 2 || id[len(id)-1] != '"' {
			return false
		}
		for _, c := range id[1 : len(id)-1] {
			if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return false
			}
		}
		return true
	}
	digits := id
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 || (digits[0] == '0' && len(digits) > 1) || (len(id) > len(digits) && string(digits) == "0") {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// appendResultLine appends the JSON-RPC answer to a request, and a newline: the
// result is written as given (a JSON value).
func appendResultLine(dst []byte, id json.RawMessage, result []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}', '\n')
}

// withReceiptMeta is an upstream's result object as the upstream sent it, with
// _meta["svc/receipt"] set to the receipt's id (whatever the upstream put there), so
// the agent gets the upstream's content unchanged. noMeta says the result has no
// member named _meta in any case: then the receipt's _meta goes in front of its
// members as they stand; otherwise the members are written again in sorted order
// (the raw result holds no duplicate names: its receipt recorded it). False when raw
// is not an object with an object or absent _meta.
func withReceiptMeta(raw json.RawMessage, receiptID string, noMeta bool) ([]byte, bool) {
	id, err := json.Marshal(receiptID)
	if err != nil {
		return nil, false
	}
	if noMeta {
		body := bytes.TrimLeft(raw, " \t\r\n")
		if len(body) == 0 || body[0] != '{' {
			return nil, false
		}
		body = bytes.TrimLeft(body[1:], " \t\r\n")
		out := make([]byte, 0, len(raw)+len(id)+32)
		out = append(out, `{"_meta":{"`+MetaReceipt+`":`...)
		out = append(out, id...)
		out = append(out, '}')
		if len(body) > 0 && body[0] != '}' {
			out = append(out, ',')
		}
		return append(out, body...), true
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil || top == nil {
		return nil, false
	}
	for k := range top {
		if k != "_meta" && strings.EqualFold(k, "_meta") {
			return nil, false // a Go client would read that member as _meta, not ours
		}
	}
	meta := map[string]json.RawMessage{}
	if m, ok := top["_meta"]; ok && string(m) != "null" {
		if json.Unmarshal(m, &meta) != nil || meta == nil {
			return nil, false
		}
	}
	meta[MetaReceipt] = id
	var buf bytes.Buffer
	buf.Grow(len(raw) + 64)
	buf.WriteString(`{"_meta":`)
	writeObject(&buf, meta)
	for _, k := range sortedKeys(top) {
		if k == "_meta" {
			continue
		}
		buf.WriteByte(',')
		writeKey(&buf, k)
		buf.Write(top[k])
	}
	buf.WriteByte('}')
	return buf.Bytes(), true
}

func writeObject(buf *bytes.Buffer, m map[string]json.RawMessage) {
	buf.WriteByte('{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeKey(buf, k)
		buf.Write(m[k])
	}
	buf.WriteByte('}')
}

func writeKey(buf *bytes.Buffer, k string) {
	q, _ := json.Marshal(k) // a string always encodes
	buf.Write(q)
	buf.WriteByte(':')
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// scanToolCall is decodeToolCall without decoding, for a request of the usual shape:
// exactly the members "jsonrpc":"2.0", "id" (one plainID takes), "method":"tools/call"
// and "params", in any order, each once, params holding exactly "name" (a string of
// printable ASCII without escapes) and "arguments" (any value), each once, the line
// valid JSON (package wire scans it). False: decode it (FuzzDecodeToolCall holds
// both to mcp-go's decoding).
func scanToolCall(line []byte) (*toolCallRequest, bool) {
	req := &toolCallRequest{}
	version, method, params := false, false, false
	ok := wire.ScanObject(line, func(name string, v []byte) bool {
		switch {
		case name == "jsonrpc" && !version && string(v) == `"2.0"`:
			version = true
		case name == "method" && !method && string(v) == `"tools/call"`:
			method = true
		case name == "id" && req.id == nil && plainID(v):
			req.id = v
		case name == "params" && !params:
			params = true
			return wire.ScanObject(v, func(name string, v []byte) bool {
				switch {
				case name == "name" && req.name == "" && len(v) > 2 && wire.PlainASCIIString(v):
					req.name = string(v[1 : len(v)-1])
				case name == "arguments" && req.args == nil:
					req.args = v
				default:
					return false
				}
				return true
			})
		default:
			return false
		}
		return true
	})
	if !ok || !version || !method || req.id == nil || req.name == "" || !json.Valid(line) {
		return nil, false
	}
	return req, true
}
