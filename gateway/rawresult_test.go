package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"svc.dev/svc/gateway"
	"svc.dev/svc/internal/testkit"
)

// TestGatewayRecordsRawResult: the receipt records the upstream's result as it was
// sent (a member mcp-go does not model included), and a result a receipt cannot
// record as sent (duplicate names, which mcp-go's parse resolves) is recorded as
// mcp-go parsed it, instead of failing the receipt of a call that already happened.
// The upstream is a real mcp-go server; its answers are edited on the wire.
func TestGatewayRecordsRawResult(t *testing.T) {
	srv := server.NewMCPServer("raw", "1")
	srv.AddTool(mcp.NewTool("lookup", mcp.WithString("q")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("line one\nline two <&>"), nil
	})
	var inject atomic.Value
	inject.Store("")
	h := server.NewStreamableHTTPServer(srv)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if extra := inject.Load().(string); extra != "" && bytes.Contains(body, []byte(`"content":[`)) {
			body = bytes.Replace(body, []byte(`"result":{`), []byte(`"result":{`+extra+`,`), 1)
		}
		for k, v := range rec.Header() {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(rec.Code)
		w.Write(body)
	}))
	t.Cleanup(ts.Close)

	f := newFixture(t, func(cfg map[string]any) {
		delete(cfg, "facts")
		delete(cfg, "precommit")
		cfg["upstream"] = map[string]any{"url": ts.URL + "/mcp"}
	})
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`@id("all") permit (principal, action, resource);`), 0o644)
	g := newGateway(t, f)
	s, err := g.NewSession("", f.writeGrant(t, "g.json", []string{"lookup"}, time.Now().Add(-time.Minute), time.Hour, nil))
	if err != nil {
		t.Fatal(err)
	}
	call := func(extra string) map[string]any {
		t.Helper()
		inject.Store(extra)
		r := g.Call(context.Background(), s, "lookup", json.RawMessage(`{"q":"x"}`), nil)
		if r.IsError || resText(r) != "line one\nline two <&>" {
			t.Fatalf("lookup with %s injected: %s", extra, resText(r))
		}
		if err := g.Flush(); err != nil {
			t.Fatal(err)
		}
		b := readBundle(t, f, r.Meta.AdditionalFields["svc/receipt"].(string))
		rep := verifyBundle(b, f, f.gw) // a local log: the gateway signs its heads
		if !rep.Verified {
			t.Fatalf("receipt with %s injected: first failure %q", extra, rep.FirstFailure())
		}
		var res map[string]any
		if err := json.Unmarshal(testkit.Predicate(t, b).Execution.Result, &res); err != nil {
			t.Fatal(err)
		}
		if c, _ := res["content"].([]any); len(c) != 1 || c[0].(map[string]any)["text"] != "line one\nline two <&>" {
			t.Fatalf("recorded result %v", res)
		}
		return res
	}
	if res := call(`"vendorExtra":{"z":1,"a":"é"}`); !strings.Contains(mustJSON(res["vendorExtra"]), `"a":"é"`) {
		t.Fatalf("the receipt does not record the result as sent: %v", res)
	}
	if res := call(`"vendorExtra":1,"vendorExtra":2`); res["vendorExtra"] != nil {
		t.Fatalf("a result with duplicate names was recorded as sent: %v", res)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

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
		got, hasMeta, ok := gateway.ParseCallToolResult(raw)
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
