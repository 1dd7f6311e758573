package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

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
