package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"svc.dev/svc/gateway/upstream"
)

var toolCallSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}`,
	`{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"},"_meta":{"progressToken":3,"svc/model":"m","x":[1,{"y":null}]}}}`,
	`{"jsonrpc":"2.0","id":-7,"method":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"echo","arguments":null,"_meta":null}}`,
	`{"jsonrpc":"2.0","id":12345678901234567890,"method":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":1e3,"method":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":"<&>","method":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":"\u0041","method":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":1,"METHOD":"tools/call","Params":{"NAME":"echo","Arguments":[1,2]}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","task":{"ttl":1000}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","requestState":"s"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":[]}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"other"},"id":2}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","result":{},"params":{"name":"echo"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
	`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}]`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\xff"}}`,
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{ \"a\" : 1 }}}\n",
	// The TypeScript SDK's order, scanned (scanToolCall); then what the scan leaves.
	`{"method":"tools/call","params":{"name":"read_text_file","arguments":{"path":"/a \"b\" {]"}},"jsonrpc":"2.0","id":3}` + "\n",
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":null}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"a":1},}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\u00e9cho","arguments":{}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"a":[}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{},"arguments":[]}}`,
}

// FuzzDecodeToolCall: whenever the fast path takes a line as a plain tools/call
// request, mcp-go's server decodes the same line to the same request (method,
// version, id as it would echo it, tool name, the arguments and _meta the handler
// gets) and serves it through the tools/call handler, not a task or a round trip.
func FuzzDecodeToolCall(f *testing.F) {
	for _, s := range toolCallSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, ok := decodeToolCall(line)
		if !ok {
			return
		}
		var raw json.RawMessage
		if err := json.Unmarshal(line, &raw); err != nil {
			t.Fatalf("%q: taken, but mcp-go's stdio server answers a parse error: %v", line, err)
		}
		var base struct { // as server.MCPServer.HandleMessage decodes it
			JSONRPC string        `json:"jsonrpc"`
			Method  mcp.MCPMethod `json:"method"`
			ID      any           `json:"id,omitempty"`
			Result  any           `json:"result,omitempty"`
		}
		if err := json.Unmarshal(line, &base); err != nil || base.JSONRPC != mcp.JSONRPC_VERSION || base.Method != mcp.MethodToolsCall || base.ID == nil || base.Result != nil {
			t.Fatalf("%q: taken, but mcp-go sees %+v (%v)", line, base, err)
		}
		id, err := json.Marshal(mcp.NewRequestId(base.ID))
		if err != nil || !bytes.Equal(id, req.id) {
			t.Fatalf("%q: answered with id %s, mcp-go answers with %s (%v)", line, req.id, id, err)
		}
		var want mcp.CallToolRequest
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatalf("%q: taken, but mcp-go refuses the request: %v", line, err)
		}
		if want.Params.Task != nil || want.Params.RequestState != "" || want.Params.InputResponses != nil || want.Params.Meta.ProtocolVersion() != "" {
			t.Fatalf("%q: taken, but mcp-go serves it otherwise: %+v", line, want.Params)
		}
		if req.name != want.Params.Name {
			t.Fatalf("%q: tool %q, mcp-go %q", line, req.name, want.Params.Name)
		}
		if got, w := requestArgsRaw(req.args), requestArgs(want); !bytes.Equal(got, w) {
			t.Fatalf("%q: arguments %s, mcp-go %s", line, got, w)
		}
		if got, w := req.meta, requestMeta(want); !reflect.DeepEqual(got, w) {
			t.Fatalf("%q: _meta %#v, mcp-go %#v", line, got, w)
		}
	})
}

// TestDecodeToolCallDeclines: what mcp-go would answer otherwise is left to it; the
// usual requests are scanned, not decoded.
func TestDecodeToolCallDeclines(t *testing.T) {
	for _, i := range []int{0, 24, 25} {
		if _, ok := scanToolCall([]byte(toolCallSeeds[i])); !ok {
			t.Errorf("not scanned: %s", toolCallSeeds[i])
		}
	}
	taken := map[string]bool{}
	for _, s := range toolCallSeeds {
		_, ok := decodeToolCall([]byte(s))
		taken[s] = ok
	}
	for i, want := range []bool{true, false, true, true, false, false, false, false, false, false, false, false, true,
		false, false, false, false, false, true, false, false, false, false, true,
		true, true, false, true, false, true} {
		if taken[toolCallSeeds[i]] != want {
			t.Errorf("%s: taken %v, want %v", toolCallSeeds[i], taken[toolCallSeeds[i]], want)
		}
	}
}

// FuzzWithReceiptMeta: the agent's answer is the upstream's result object with
// _meta["svc/receipt"] set and every other member as sent, whichever way it is built.
func FuzzWithReceiptMeta(f *testing.F) {
	for _, s := range []string{
		`{"content":[{"type":"text","text":"x"}]}`, `{}`, ` { } `, `{"content":[],"_meta":{"svc/receipt":"forged","k":1}}`,
		`{"content":[],"_meta":null}`, `{"a":"<&>\u2028","_META":{"x":1}}`, `{"_Meta":{"svc/receipt":"forged"}}`, `{"content":[],"_meta":[]}`, `[]`, `{"content":[]`,
	} {
		f.Add(s, "7a0e5c1e-5d1b-4b57-9c1e-8f8f0b1c2d3e")
	}
	f.Fuzz(func(t *testing.T, raw, id string) {
		var top map[string]json.RawMessage
		if json.Unmarshal([]byte(raw), &top) != nil || top == nil || hasDuplicateNames(raw) || !utf8.ValidString(id) {
			return // a receipt records only results without duplicate names; its id is a UUID
		}
		_, hasMeta, parsed := upstream.ParseCallToolResult(json.RawMessage(raw))
		noMeta := true
		for k := range top {
			noMeta = noMeta && !strings.EqualFold(k, "_meta")
		}
		if parsed && noMeta == hasMeta {
			t.Fatalf("%s: parse says hasMeta %v", raw, hasMeta)
		}
		for _, nm := range []bool{false, noMeta} {
			out, ok := withReceiptMeta(json.RawMessage(raw), id, nm)
			if !ok {
				continue
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%s (noMeta %v): answer %s does not parse: %v", raw, nm, out, err)
			}
			var asGo struct { // encoding/json matches names in any case, the last one winning
				Meta map[string]any `json:"_meta"`
			}
			if err := json.Unmarshal(out, &asGo); err != nil || asGo.Meta[MetaReceipt] != id {
				t.Fatalf("%s (noMeta %v): a Go client reads _meta %v from %s", raw, nm, asGo.Meta, out)
			}
			var meta map[string]any
			if err := json.Unmarshal(got["_meta"], &meta); err != nil || meta[MetaReceipt] != id {
				t.Fatalf("%s: answer's _meta %s (%v)", raw, got["_meta"], err)
			}
			for k, v := range top {
				if k != "_meta" && !jsonEqual(got[k], v) {
					t.Fatalf("%s: member %s became %s", raw, k, got[k])
				}
			}
			if len(got) != len(top)+boolInt(top["_meta"] == nil) {
				t.Fatalf("%s: %d members, answer %s", raw, len(got), out)
			}
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// hasDuplicateNames reports a JSON object with a member name twice at its top level.
func hasDuplicateNames(raw string) bool {
	dec := json.NewDecoder(strings.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		k, _ := tok.(string)
		if seen[k] {
			return true
		}
		seen[k] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}

// TestResultLineMatchesMCPGo: an answer built from a parsed result is the line
// mcp-go's stdio server writes for it.
func TestResultLineMatchesMCPGo(t *testing.T) {
	res := errorResult("Denied by policy: x <y> & z (receipt r)")
	res.Meta = &mcp.Meta{AdditionalFields: map[string]any{MetaReceipt: "r"}}
	for _, id := range []string{`1`, `-3`, `"abc"`, `0`} {
		var v any
		_ = json.Unmarshal([]byte(id), &v)
		want, err := json.Marshal(mcp.NewJSONRPCResultResponse(mcp.NewRequestId(v), res))
		if err != nil {
			t.Fatal(err)
		}
		if got := resultLine(json.RawMessage(id), res, nil); string(got) != string(want)+"\n" {
			t.Fatalf("id %s:\n got %s\nwant %s", id, got, want)
		}
	}
	_ = server.NewMCPServer // the server whose encoding this is
}
