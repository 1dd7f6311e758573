package upstream_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway/upstream"
)

// FuzzParseCallToolResult: the gateway's one-pass parse of an upstream's tools/call
// result gives what mcp-go's ParseCallToolResult gives, whenever it does not leave
// the result to mcp-go.
func FuzzParseCallToolResult(f *testing.F) {
	for _, s := range []string{
		`{"content":[{"type":"text","text":"hello\n"}]}`,
		`{"content":[{"type":"text","text":"a","annotations":{"audience":["user"],"priority":0.5},"_meta":{"k":1}}],"isError":true}`,
		`{"content":[{"type":"image","data":"aGk=","mimeType":"image/png"},{"type":"audio","data":"aGk=","mimeType":"audio/wav"}]}`,
		`{"content":[{"type":"resource","resource":{"uri":"file:///x","mimeType":"text/plain","text":"t"}},{"type":"resource_link","uri":"file:///y","name":"y"}]}`,
		`{"content":[],"structuredContent":{"content":"x","n":[1,2.5,null]},"_meta":{"svc/facts":["f1"],"progressToken":3}}`,
		`{"content":[{"type":"text","text":"x"}],"resultType":"complete","vendor":{"a":1}}`,
		`{"resultType":"input_required","inputRequests":{"a":{"method":"elicitation/create","params":{}}},"requestState":"s"}`,
		`{"content":null}`, `{}`, `{"content":[{"type":"nope"}]}`, `{"content":[1]}`, `[]`, `{"content":[{"type":"text","text":"a"}],"content":[]}`,
		`{"content":[{"type":"text","text":"x"}],"structuredContent":"not an object","isError":false}`,
		`{"content":[],"_meta":null}`, `{"content":[],"_META":{}}`, `{"content":[],"_meta":{},"_meta":null}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw := json.RawMessage(s)
		got, hasMeta, ok := upstream.ParseCallToolResult(raw)
		if !ok {
			return
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(raw, &members); err != nil {
			t.Fatalf("%s: parsed, but not an object: %v", s, err)
		}
		named := false
		for k := range members {
			named = named || strings.EqualFold(k, "_meta")
		}
		if hasMeta != named {
			t.Fatalf("%s: hasMeta %v, a member named _meta in some case: %v", s, hasMeta, named)
		}
		want, err := mcp.ParseCallToolResult(&raw)
		if err != nil {
			t.Fatalf("%s: parsed in one pass, but mcp-go refuses it: %v", s, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\none pass %#v\nmcp-go   %#v", s, got, want)
		}
	})
}
