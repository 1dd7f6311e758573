package upstream

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// FuzzToolCallLine: the fast path's request to a stdio upstream decodes, as mcp-go's
// server decodes it, to the call mcp-go's client would have sent.
func FuzzToolCallLine(f *testing.F) {
	f.Add("echo", []byte(`{"message":"hi"}`), []byte(`{"svc/agent":"a","x":[1,2]}`))
	f.Add("a\"b<>", []byte("{ \"a\" :\n 1 }"), []byte(`null`))
	f.Add("t", []byte(`{}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, tool string, args, metaJSON []byte) {
		var meta map[string]any
		if json.Unmarshal(metaJSON, &meta) != nil || !json.Valid(args) {
			return // the call path sends valid arguments, {} at least
		}
		line, err := toolCallLine(firstRawID+5, tool, args, meta)
		if err != nil {
			t.Fatalf("%q %q: %v", tool, args, err)
		}
		if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("not one line: %q", line)
		}
		var got mcp.CallToolRequest
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		want := mcp.CallToolRequest{}
		want.Params.Name = tool
		want.Params.Arguments = json.RawMessage(args)
		want.Params.Meta = &mcp.Meta{AdditionalFields: meta}
		wb, _ := json.Marshal(want.Params)
		var wantParams mcp.CallToolParams
		if err := json.Unmarshal(wb, &wantParams); err != nil {
			t.Fatal(err)
		}
		if got.Method != string(mcp.MethodToolsCall) || !reflect.DeepEqual(got.Params, wantParams) {
			t.Fatalf("%s:\n got %#v\nwant %#v", line, got.Params, wantParams)
		}
	})
}

// FuzzParseHead: whenever the head-only parse takes a result, the full parse takes it
// too, with the same isError, _meta, resultType and answer to "has a _meta member".
func FuzzParseHead(f *testing.F) {
	for _, s := range []string{
		`{"content":[{"type":"text","text":"hello\n"}]}`,
		`{"content":[{"type":"text","text":"a"},{"type":"text","text":""}],"isError":true,"_meta":{"svc/facts":["f1"],"progressToken":3}}`,
		`{"content":[{"type":"text","text":"a","annotations":{"priority":1}}]}`, `{"content":[{"type":"text","text":5}]}`,
		`{"content":[{"TYPE":"text","Text":"x","type":"image"}]}`, `{"content":[{"type":"t\u0065xt","text":"x"}]}`,
		`{"content":[],"_meta":null,"resultType":"complete"}`, `{"content":[],"isError":"yes"}`, `{"content":null}`, `{}`,
		`{"content":[{"type":"text","text":"x"}],"structuredContent":{"n":1e999}}`,
		`{"content":[{"type":"text","text":"x"}],"structuredContent":{"content":"x\\\"1e999","n":[1.5,-2,true,null]}}`,
		`{"content":[],"structuredContent":[1E2]}`, `{"content":[],"structuredContent":null}`, `{"content":[{"type":"text","text":"x","text":null}]}`,
	} {
		f.Add(s)
	}
	for _, s := range []string{
		`{"content":[{"type":"text","text":"x"}],"Content":[]}`, `{"content":[],"content":[]}`, `{"content":[],"IsError":true}`,
		`{"content":[],"isError":null}`, `{"content":[],"resultType":"input_required"}`, `{"content":[],"inputRequests":{}}`,
		`{"x":{"content":1},"content":[ {"text":"a","type":"text"} ,{"type":"text","text":"\"}"}],"isError":false,"_meta":{"a":1}}`,
		`{"content":[{"type":"text","text":"x","type":"text"}]}`, `{"content":[{"type":"text"}]}`, `{"content":[1]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw := json.RawMessage(s)
		if !json.Valid(raw) {
			return // parseHead's callers have checked or decoded the result
		}
		head, hasMeta, ok := parseHead(raw)
		if !ok {
			return
		}
		if scanned, scannedMeta, ok := scanHead(raw); ok {
			decoded, decodedMeta, ok := decodeHead(raw)
			if !ok || scanned.IsError != decoded.IsError || scanned.ResultType != decoded.ResultType || !reflect.DeepEqual(scanned.Meta, decoded.Meta) || scannedMeta != decodedMeta {
				t.Fatalf("%s: scanned %#v %v, decoded (%v) %#v %v", s, scanned, scannedMeta, ok, decoded, decodedMeta)
			}
		}
		full, fullHasMeta, fullOK := ParseCallToolResult(raw)
		if !fullOK {
			t.Fatalf("%s: the head parse takes it, the full parse does not", s)
		}
		if head.IsError != full.IsError || head.ResultType != full.ResultType || !reflect.DeepEqual(head.Meta, full.Meta) || hasMeta != fullHasMeta {
			t.Fatalf("%s:\nhead %#v %v\nfull %#v %v", s, head, hasMeta, full, fullHasMeta)
		}
	})
}

// FuzzScanAnswer holds scanAnswer to encoding/json: a line it reads decodes, into the
// envelope claim decodes otherwise, to the same id and result, without an error or a
// method; the lines of the usual shape are read.
func FuzzScanAnswer(f *testing.F) {
	for _, s := range []string{
		`{"result":{"content":[{"type":"text","text":"hi \"there\" {]"}]},"jsonrpc":"2.0","id":1099511627777}` + "\n",
		`{"jsonrpc":"2.0","id":1099511627777,"result":{"content":[],"_meta":{"a":[1,2,{"b":"}"}]}}}`,
		` { "jsonrpc" : "2.0" , "id" : 7 , "result" : { } } ` + "\r\n",
		`{"jsonrpc":"2.0","id":7,"result":{"a":1},"id":8}`,
		`{"jsonrpc":"2.0","ID":7,"result":{"a":1}}`,
		`{"jsonrpc":"2.0","id":7,"result":{"a":1},"error":{"code":1,"message":"x"}}`,
		`{"jsonrpc":"2.0","id":7,"result":{"a":1}}x`,
		`{"jsonrpc":"2.0","id":07,"result":{"a":1}}`,
		`{"jsonrpc":"2.0","id":7e0,"result":{"a":1}}`,
		`{"jsonrpc":"2.0","id":7,"result":{"a":1,}}`,
		`{"jsonrpc":"2.0","id":7,"result":{"a":"\u00"}}`,
		`{"jsonrpc":"2.0","id":7,"result":null}`,
		`{"jsonrpc":"2.0","id":7,"method":"x","result":{}}`,
		"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"a\":\"\xff\"}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		n, result, ok := scanAnswer(line)
		if !ok {
			return
		}
		var env answerEnvelope
		if err := json.Unmarshal(line, &env); err != nil {
			t.Fatalf("scanned %q, which does not decode: %v", line, err)
		}
		id, err := strconv.ParseInt(string(env.ID), 10, 64)
		if err != nil || id != n || env.Method != "" || env.Error != nil || !bytes.Equal(env.Result, result) {
			t.Fatalf("%q: scanned id %d result %q; decoded id %s result %q method %q error %v", line, n, result, env.ID, env.Result, env.Method, env.Error)
		}
	})
}

// TestScanAnswerReadsTheUsualShape: the answers upstreams write (the TypeScript SDK
// puts the result first) and their results are scanned, not decoded.
func TestScanAnswerReadsTheUsualShape(t *testing.T) {
	for _, line := range []string{
		`{"result":{"content":[{"type":"text","text":"x"}]},"jsonrpc":"2.0","id":1099511627777}` + "\n",
		`{"jsonrpc":"2.0","id":1099511627778,"result":{"content":[{"type":"text","text":"x"}],"isError":false}}` + "\n",
	} {
		if _, _, ok := scanAnswer([]byte(line)); !ok {
			t.Errorf("not scanned: %s", line)
		}
	}
	for _, result := range []string{
		`{"content":[{"type":"text","text":"hello\n"}],"structuredContent":{"content":"hello\n"}}`,                                                   // server-filesystem
		`{"content":[{"type":"text","text":"Echo: x"}]}`,                                                                                             // server-everything
		`{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"n","version":"1"}},"content":[{"type":"text","text":"x"}],"resultType":"complete"}`, // mcp-go
	} {
		if _, _, ok := scanHead([]byte(result)); !ok {
			t.Errorf("not scanned: %s", result)
		}
	}
}
