package gateway

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// The fast paths' usual messages (the agent's tools/call request, the upstream's
// answer line, its result's head) are scanned instead of decoded: encoding/json
// reads a message twice per decoding (validating, then decoding) and the fast path
// decoded each twice. A scan finds the members of a JSON object of the usual shape,
// spelt exactly, and declines anything else, which is decoded as before; what a scan
// does not validate, json.Valid does, once. Each scanner is held to encoding/json or
// mcp-go by a fuzz target (FuzzDecodeToolCall, FuzzScanAnswer, FuzzParseHead).

// scanAnswer reads a stdio upstream's answer line of the usual shape without
// decoding it: a JSON object with exactly the members "jsonrpc":"2.0", "id" (an
// integer) and "result" (an object), in any order, names spelt exactly so, each once.
// It returns the id and the result's bytes as json.Unmarshal into answerEnvelope
// would give them (FuzzScanAnswer), having checked that the result is valid JSON;
// false for any other line, which claim decodes in full. The result is decoded once
// later (parseHead), so the line is no longer decoded twice.
func scanAnswer(line []byte) (int64, json.RawMessage, bool) {
	var id, result []byte
	version := false
	ok := scanObject(line, func(name string, v []byte) bool {
		switch {
		case name == "jsonrpc" && !version && string(v) == `"2.0"`:
			version = true
		case name == "id" && id == nil && plainInteger(v):
			id = v
		case name == "result" && result == nil && v[0] == '{':
			result = v
		default:
			return false
		}
		return true
	})
	if !ok || !version || id == nil || result == nil || !json.Valid(result) {
		return 0, nil, false
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	if err != nil {
		return 0, nil, false
	}
	return n, result, true
}

// memberName reads `"name":` at i, for a name of printable ASCII without escapes.
func memberName(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	j := i + 1
	for j < len(b) && b[j] >= 0x20 && b[j] < 0x7f && b[j] != '"' && b[j] != '\\' {
		j++
	}
	if j >= len(b) || b[j] != '"' {
		return "", 0, false
	}
	k := skipSpace(b, j+1)
	if k >= len(b) || b[k] != ':' {
		return "", 0, false
	}
	return string(b[i+1 : j]), k + 1, true
}

// plainInteger: digits without a leading zero (a JSON integer that is not negative).
func plainInteger(v []byte) bool {
	if len(v) == 0 || len(v) > 18 || (v[0] == '0' && len(v) > 1) {
		return false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value starting at i (-1 when none can be
// found): a string, an object or array by its brackets outside strings, anything else
// up to the next delimiter. It does not validate: the scanners' callers do.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				i--
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// skipString returns the end of the string starting at i (-1 if it does not end).
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// headMembers are the members of a tools/call result that resultHead decodes; a
// member whose name matches one only in another case would be read as it by
// encoding/json, so scanHead leaves such a result to the decoder.
var headMembers = []string{"_meta", "resultType", "content", "structuredContent", "isError", "inputRequests", "requestState"}

// scanHead is parseHead without decoding, for a valid JSON result (its callers have
// checked or decoded it) of the usual shape: an object whose members named as
// resultHead's are spelt exactly so, each once, where content is an array of items
// with exactly the members "type":"text" and "text" (a string), isError is a literal
// boolean, resultType a string of printable ASCII without escapes, and no inputRequests or
// requestState. Other members are skipped, as encoding/json skips them. False:
// decode it (FuzzParseHead holds both to the full parse).
func scanHead(raw []byte) (*mcp.CallToolResult, bool, bool) {
	res := &mcp.CallToolResult{}
	var meta []byte
	seen := 0 // a bit per headMembers
	ok := scanObject(raw, func(name string, v []byte) bool {
		if k := slices.Index(headMembers, name); k >= 0 {
			if seen&(1<<k) != 0 {
				return false // the last would win
			}
			seen |= 1 << k
		}
		return headMember(res, name, v, &meta)
	})
	if !ok || seen&(1<<slices.Index(headMembers, "content")) == 0 || res.ResultType == mcp.ResultTypeInputRequired {
		return nil, false, false
	}
	if meta != nil && string(meta) != "null" {
		res.Meta = &mcp.Meta{}
		if json.Unmarshal(meta, res.Meta) != nil {
			return nil, false, false
		}
	}
	return res, meta != nil, true
}

// headMember takes one member of a result into res (meta: the raw _meta); false
// when scanHead leaves the result to the decoder.
func headMember(res *mcp.CallToolResult, name string, v []byte, meta *[]byte) bool {
	switch name {
	case "content":
		return plainTextItems(v)
	case "isError":
		res.IsError = string(v) == "true"
		return string(v) == "true" || string(v) == "false"
	case "resultType":
		if !plainASCIIString(v) {
			return false // decoded, an escape or a byte that is not UTF-8 would change
		}
		res.ResultType = mcp.ResultType(v[1 : len(v)-1])
		return true
	case "_meta":
		*meta = v
		return true
	case "structuredContent":
		return numbersFitFloat(v)
	}
	for _, m := range headMembers {
		if strings.EqualFold(name, m) {
			return false // inputRequests, requestState, or a member in another case
		}
	}
	return true
}

// plainTextItems: v is an array of objects with exactly the members "type":"text"
// and "text" (a string), each once.
func plainTextItems(v []byte) bool {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '[' {
		return false
	}
	for i = skipSpace(v, i+1); i < len(v) && v[i] != ']'; i = skipSpace(v, i+1) {
		end := skipValue(v, i)
		if end < 0 || !plainTextItem(v[i:end]) {
			return false
		}
		if i = skipSpace(v, end); i < len(v) && v[i] == ']' {
			break
		}
		if i >= len(v) || v[i] != ',' {
			return false
		}
	}
	return true
}

func plainTextItem(item []byte) bool {
	typ, text := false, false
	return scanObject(item, func(name string, v []byte) bool {
		switch {
		case name == "type" && !typ && string(v) == `"text"`:
			typ = true
		case name == "text" && !text && v[0] == '"':
			text = true
		default:
			return false
		}
		return true
	}) && typ && text
}

// scanToolCall is decodeToolCall without decoding, for a request of the usual shape:
// exactly the members "jsonrpc":"2.0", "id" (one plainID takes), "method":"tools/call"
// and "params", in any order, each once, params holding exactly "name" (a string of
// printable ASCII without escapes) and "arguments" (any value), each once, the line
// valid JSON. False: decode it (FuzzDecodeToolCall holds both to mcp-go's decoding).
func scanToolCall(line []byte) (*toolCallRequest, bool) {
	req := &toolCallRequest{}
	version, method, params := false, false, false
	ok := scanObject(line, func(name string, v []byte) bool {
		switch {
		case name == "jsonrpc" && !version && string(v) == `"2.0"`:
			version = true
		case name == "method" && !method && string(v) == `"tools/call"`:
			method = true
		case name == "id" && req.id == nil && plainID(v):
			req.id = v
		case name == "params" && !params:
			params = true
			return scanObject(v, func(name string, v []byte) bool {
				switch {
				case name == "name" && req.name == "" && len(v) > 2 && plainASCIIString(v):
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

// scanObject calls member for each member of the JSON object b (surrounded by
// optional whitespace) until it returns false; false when b is not such an object as
// far as the scan sees (it does not validate the values).
func scanObject(b []byte, member func(name string, v []byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		name, next, ok := memberName(b, i)
		if !ok {
			return false
		}
		start := skipSpace(b, next)
		end := skipValue(b, start)
		if end < 0 || !member(name, b[start:end]) {
			return false
		}
		switch i = skipSpace(b, end); {
		case i < len(b) && b[i] == '}':
			return skipSpace(b, i+1) == len(b)
		case i >= len(b) || b[i] != ',':
			return false
		}
		i = skipSpace(b, i+1)
	}
}

// plainASCIIString: v is a JSON string of printable ASCII without escapes.
func plainASCIIString(v []byte) bool {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return false
	}
	for _, c := range v[1 : len(v)-1] {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
