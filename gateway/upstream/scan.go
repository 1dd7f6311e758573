package upstream

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway/internal/wire"
)

// The upstream's usual messages (its answer line, its result's head) are scanned
// instead of decoded (package wire): encoding/json reads a message twice per
// decoding (validating, then decoding). FuzzScanAnswer and FuzzParseHead hold the
// scanners to encoding/json and to the full parse.

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
	ok := wire.ScanObject(line, func(name string, v []byte) bool {
		switch {
		case name == "jsonrpc" && !version && string(v) == `"2.0"`:
			version = true
		case name == "id" && id == nil && wire.PlainInteger(v):
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
	ok := wire.ScanObject(raw, func(name string, v []byte) bool {
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
		if !wire.PlainASCIIString(v) {
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
	i := wire.SkipSpace(v, 0)
	if i >= len(v) || v[i] != '[' {
		return false
	}
	for i = wire.SkipSpace(v, i+1); i < len(v) && v[i] != ']'; i = wire.SkipSpace(v, i+1) {
		end := wire.SkipValue(v, i)
		if end < 0 || !plainTextItem(v[i:end]) {
			return false
		}
		if i = wire.SkipSpace(v, end); i < len(v) && v[i] == ']' {
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
	return wire.ScanObject(item, func(name string, v []byte) bool {
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
