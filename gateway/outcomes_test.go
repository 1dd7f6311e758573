package gateway_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"svc.dev/svc/conformance"
	"svc.dev/svc/exporters"
	"svc.dev/svc/gateway"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// recordingUpstream is a real MCP server (mcp-go, Streamable HTTP) that remembers the
// _meta of each call, declares a served fact and signs its results.
type recordingUpstream struct {
	url  string
	key  *signer.Key
	mu   sync.Mutex
	meta []map[string]any
}

func startRecordingUpstream(t testing.TB) *recordingUpstream {
	t.Helper()
	u := &recordingUpstream{}
	u.key, _ = signer.GenerateKey()
	srv := server.NewMCPServer("recording", "1")
	srv.AddTool(mcp.NewTool("lookup", mcp.WithString("q")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		m := map[string]any{}
		if req.Params.Meta != nil {
			m = req.Params.Meta.AdditionalFields
		}
		u.mu.Lock()
		u.meta = append(u.meta, m)
		u.mu.Unlock()
		res := mcp.NewToolResultText(`{"balance":42}`)
		content, _ := json.Marshal(map[string]any{"content": res.Content, "isError": false})
		var cd struct {
			Content json.RawMessage `json:"content"`
			IsError bool            `json:"isError"`
		}
		json.Unmarshal(content, &cd)
		d, _ := receipt.Digest(cd)
		id, _ := m["svc/receipt"].(string)
		sig, _ := receipt.SignJSON(receipt.PayloadUpstream, receipt.UpstreamAttestation{ReceiptID: id, Tool: "lookup", ContentDigest: d}, u.key)
		res.Meta = &mcp.Meta{AdditionalFields: map[string]any{"svc/facts": []any{"kb:article-" + req.GetString("q", "")}, "svc/upstream-signature": sig}}
		return res, nil
	})
	srv.AddTool(mcp.NewTool("boom"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, context.DeadlineExceeded
	})
	ts := httptest.NewServer(server.NewStreamableHTTPServer(srv))
	t.Cleanup(ts.Close)
	u.url = ts.URL + "/mcp"
	return u
}

// flakyProxy forwards to a real log server, failing appends while down is set.
type flakyProxy struct {
	down atomic.Bool
	ts   *httptest.Server
}

func startLog(t testing.TB) (*signer.Key, *flakyProxy) {
	t.Helper()
	real := logtest.Start(t, logtest.Options{Tenants: []logtest.Tenant{{ID: "default"}}})
	key := real.Key
	p := &flakyProxy{}
	p.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			http.Error(w, `{"error":"log unavailable: store did not answer"}`, http.StatusServiceUnavailable)
			return
		}
		req, _ := http.NewRequest(r.Method, real.URL+r.URL.Path, r.Body)
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		var buf [64 << 10]byte
		for {
			n, err := resp.Body.Read(buf[:])
			w.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(p.ts.Close)
	return key, p
}

func newGateway(t *testing.T, f *fixture) *gateway.Gateway {
	t.Helper()
	cfg, err := gateway.LoadConfig(f.config)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(context.Background(), cfg, gateway.Options{LoadPolicy: gateway.CedarPolicy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func resText(r *mcp.CallToolResult) string {
	var s []string
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			s = append(s, tc.Text)
		}
	}
	return strings.Join(s, "\n")
}

func TestGatewayOutcomes(t *testing.T) {
	up := startRecordingUpstream(t)
	logKey, logProxy := startLog(t)
	api := paymentsAPI(t)
	f := newFixture(t, func(cfg map[string]any) {
		delete(cfg, "upstream")
		delete(cfg, "logFile")
		cfg["log"] = map[string]any{"url": logProxy.ts.URL + "/append", "timeoutMs": 2000}
		cfg["upstreams"] = []any{
			map[string]any{"name": "kb", "url": up.url},
			map[string]any{"name": "dead", "rest": map[string]any{"baseUrl": "http://127.0.0.1:1", "tools": []any{map[string]any{"name": "unreachable", "method": "GET", "path": "/x"}}}},
			map[string]any{"name": "payments", "rest": map[string]any{"baseUrl": api.URL, "headers": map[string]string{"X-Api-Key": "rest-secret"},
				"tools": []any{map[string]any{"name": "create-payment", "method": "POST", "path": "/payments"},
					map[string]any{"name": "capture", "method": "POST", "path": "/payments/{id}/capture", "body": "none", "query": []string{"note"}},
					map[string]any{"name": "refund", "method": "DELETE", "path": "/payments/{id}"}}}},
		}
		cfg["facts"] = []any{
			map[string]any{"name": "kb", "tool": "lookup", "args": map[string]any{"q": "$args.topic"}, "forTools": []string{"create-payment"}},
			map[string]any{"name": "extra", "tool": "lookup", "args": map[string]any{"q": "$args.optionalTopic"}, "forTools": []string{"create-payment"}, "optional": true},
		}
		cfg["precommit"] = []string{"create-payment"}
	})
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`
@id("all") permit (principal, action, resource) unless { context has args && context.args has amount && context.args.amount > 10000 };
`), 0o644)
	g := newGateway(t, f)
	grant := f.writeGrant(t, "g.json", []string{"lookup", "unreachable", "create-payment", "boom", "capture", "refund"}, time.Now().Add(-time.Minute), time.Hour, nil)
	s, err := g.NewSession("", grant)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := func(tool string, args string, meta map[string]any) *mcp.CallToolResult {
		return g.Call(ctx, s, tool, json.RawMessage(args), meta)
	}
	// Forwarded with the gateway's meta keys; an agent's svc/* keys are stripped.
	r := call("lookup", `{"q":"refunds"}`, map[string]any{"svc/receipt": "forged", "svc/agent": "mallory", "trace": "t1"})
	if r.IsError {
		t.Fatalf("lookup: %s", resText(r))
	}
	id := r.Meta.AdditionalFields["svc/receipt"].(string)
	m := up.meta[len(up.meta)-1]
	if m["svc/receipt"] != id || m["svc/agent"] != "e2e-agent" || m["svc/principal"] != "alice" || m["trace"] != "t1" {
		t.Fatalf("upstream saw _meta %v", m)
	}
	// Upstream attestation embedded; svc/facts become `consumed` on the NEXT receipt.
	b := readBundle(t, f, id)
	if up := testkit.Predicate(t, b).Execution.Upstream; len(up) == 0 {
		t.Fatal("the upstream signature was not embedded")
	}
	rep := conformance.Verify(b, conformance.Options{IssuerKeys: []signer.PublicKey{f.gw.Public()}, PrincipalKeys: []signer.PublicKey{f.alice.Public()}, UpstreamKeys: []signer.PublicKey{up.key.Public()}, LogKeys: []signer.PublicKey{logKey.Public()}})
	if !rep.Verified || !strings.Contains(strings.Join(rep.CheckNames(), ","), conformance.CheckUpstreamKey) {
		t.Fatalf("upstream-attested receipt: %+v", rep.Checks)
	}
	r = call("lookup", `{"q":"fees"}`, nil)
	if p := testkit.Predicate(t, readBundle(t, f, r.Meta.AdditionalFields["svc/receipt"].(string))); p.Consumed == nil || p.Consumed.FactIDs[0] != "kb:article-refunds" {
		t.Fatalf("consumed: %+v", p.Consumed)
	}
	// REST: path templating, body "none", the query list, and DELETE arguments in the query.
	r = call("capture", `{"id":"pay_9","note":"ship it","ignored":1}`, nil)
	if r.IsError || !strings.Contains(resText(r), `"bodyBytes":0`) || !strings.Contains(resText(r), `"id":"pay_9"`) || !strings.Contains(resText(r), `"note":"ship it"`) {
		t.Fatalf("capture: %s", resText(r))
	}
	r = call("refund", `{"id":"pay_9","reason":"duplicate"}`, nil)
	if r.IsError || !strings.Contains(resText(r), `"deleted":"pay_9"`) || !strings.Contains(resText(r), `"reason":"duplicate"`) {
		t.Fatalf("refund: %s", resText(r))
	}
	// Upstream unreachable: "Upstream error: <message> (receipt <id>)".
	r = call("unreachable", `{}`, nil)
	if !r.IsError || !strings.HasPrefix(resText(r), "Upstream error: ") || !strings.HasSuffix(resText(r), ")") || !strings.Contains(resText(r), "(receipt ") {
		t.Fatalf("unreachable: %s", resText(r))
	}
	r = call("boom", `{}`, nil)
	if !r.IsError || !strings.HasPrefix(resText(r), "Upstream error: ") && !strings.Contains(resText(r), "deadline") {
		t.Fatalf("boom: %s", resText(r))
	}
	// A non-optional fact lookup with its argument missing denies, saying why.
	r = call("create-payment", `{"amount":100}`, nil)
	if !r.IsError || !strings.HasPrefix(resText(r), "Denied by policy: fact lookup failed (receipt ") {
		t.Fatalf("missing fact argument: %s", resText(r))
	}
	// Pre-commit with the log down: withheld, distinguishable from a denial.
	logProxy.down.Store(true)
	r = call("create-payment", `{"amount":100,"topic":"p"}`, nil)
	logProxy.down.Store(false)
	if !r.IsError || !strings.HasPrefix(resText(r), "Not executed: the log did not commit the authorization") || !strings.HasSuffix(resText(r), ")") {
		t.Fatalf("withheld: %s", resText(r))
	}
	// An ordinary call whose receipt the log refuses: the agent hears it already happened.
	before := countReceipts(t, f)
	logProxy.down.Store(true)
	r = call("lookup", `{"q":"late"}`, nil)
	logProxy.down.Store(false)
	if !r.IsError || !strings.Contains(resText(r), "already happened") || countReceipts(t, f) != before {
		t.Fatalf("log refused an ordinary receipt: %s (receipts %d → %d)", resText(r), before, countReceipts(t, f))
	}
	// Pre-committed and allowed with the optional fact absent.
	r = call("create-payment", `{"amount":100,"topic":"p"}`, nil)
	if r.IsError {
		t.Fatalf("create-payment: %s", resText(r))
	}
	p := testkit.Predicate(t, readBundle(t, f, r.Meta.AdditionalFields["svc/receipt"].(string)))
	if p.Authorization == nil || p.Facts["kb"].Provenance != receipt.Observed || len(p.Facts) != 1 {
		t.Fatalf("pre-committed receipt: auth %v facts %v", p.Authorization != nil, p.Facts)
	}
}

func readBundle(t *testing.T, f *fixture, id string) *receipt.Bundle {
	t.Helper()
	b, err := receipt.ReadBundle(filepath.Join(f.dir, "receipts", id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func countReceipts(t *testing.T, f *fixture) int {
	files, _ := filepath.Glob(filepath.Join(f.dir, "receipts", "*.json"))
	files = slices.DeleteFunc(files, func(s string) bool { return strings.HasSuffix(s, ".tools.json") })
	return len(files)
}

func TestGatewayStartupMisconfiguration(t *testing.T) {
	up := startRecordingUpstream(t)
	for _, c := range []struct {
		name   string
		mutate func(map[string]any)
		want   string
	}{
		{"both upstream and upstreams", func(c map[string]any) { c["upstreams"] = []any{map[string]any{"name": "x", "url": up.url}} }, "upstream or upstreams, not both"},
		{"neither upstream nor upstreams", func(c map[string]any) { delete(c, "upstream") }, "one of upstream or upstreams is required"},
		{"both logFile and log", func(c map[string]any) { c["log"] = map[string]any{"url": "http://127.0.0.1:1/append"} }, "logFile or log, not both"},
		{"neither logFile nor log", func(c map[string]any) { delete(c, "logFile") }, "one of logFile or log is required"},
		{"a tool offered twice", func(c map[string]any) {
			delete(c, "upstream")
			c["upstreams"] = []any{map[string]any{"name": "a", "url": up.url}, map[string]any{"name": "b", "url": up.url}}
		}, "each tool must belong to exactly one upstream: boom (offered by a, b)"},
		{"missing upstream token variable", func(c map[string]any) {
			c["upstream"] = map[string]any{"url": up.url, "tokenEnv": "SVC_TEST_NO_SUCH_VAR"}
		}, "SVC_TEST_NO_SUCH_VAR"},
		{"missing REST header variable", func(c map[string]any) {
			c["upstream"] = map[string]any{"rest": map[string]any{"baseUrl": "http://127.0.0.1:1", "headerEnv": map[string]string{"X-Key": "SVC_TEST_NO_HEADER_VAR"}, "tools": []any{map[string]any{"name": "t", "method": "GET", "path": "/"}}}}
		}, "SVC_TEST_NO_HEADER_VAR"},
		{"missing log token variable", func(c map[string]any) {
			delete(c, "logFile")
			c["log"] = map[string]any{"url": "http://127.0.0.1:1/append", "tokenEnv": "SVC_TEST_NO_LOG_VAR"}
		}, "SVC_TEST_NO_LOG_VAR"},
		{"unknown field", func(c map[string]any) { c["polcyFile"] = "x" }, `unknown field "polcyFile"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, func(cfg map[string]any) {
				cfg["upstream"] = map[string]any{"url": up.url}
				delete(cfg, "facts")
				c.mutate(cfg)
			})
			cfg, err := gateway.LoadConfig(f.config)
			if err == nil {
				var g *gateway.Gateway
				g, err = gateway.New(context.Background(), cfg, gateway.Options{LoadPolicy: gateway.CedarPolicy})
				if err == nil {
					g.Close()
				}
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	// A stdio grant outside its validity window fails startup.
	f := newFixture(t, func(cfg map[string]any) { cfg["upstream"] = map[string]any{"url": up.url}; delete(cfg, "facts") })
	f.writeGrant(t, "grant.json", []string{"lookup"}, time.Now().Add(-2*time.Hour), time.Hour, nil)
	g := newGateway(t, f)
	if err := g.CheckGrant(); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired stdio grant: %v", err)
	}
}

// TestGatewayLogOverNATS: the gateway appends to a fleet log over NATS request/reply
// (log: {nats, tenant}), and its receipts verify against the log's key.
func TestGatewayLogOverNATS(t *testing.T) {
	broker, err := natsembed.Start(natsembed.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Password: "pw-of-tests"})
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Shutdown()
	lg := logtest.Start(t, logtest.Options{NATSURL: natsembed.URL(broker, "pw-of-tests"), Tenants: []logtest.Tenant{{ID: "fleet", LogID: "fleet-log"}}})
	logKey, svc := lg.Key, lg.Service
	up := startRecordingUpstream(t)
	f := newFixture(t, func(cfg map[string]any) {
		cfg["upstream"] = map[string]any{"url": up.url}
		delete(cfg, "facts")
		delete(cfg, "logFile")
		cfg["log"] = map[string]any{"nats": natsembed.URL(broker, "pw-of-tests"), "tenant": "fleet", "hashOnly": true}
	})
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`@id("all") permit (principal, action, resource);`), 0o644)
	g := newGateway(t, f)
	grant := f.writeGrant(t, "g.json", []string{"lookup"}, time.Now().Add(-time.Minute), time.Hour, nil)
	s, _ := g.NewSession("", grant)
	r := g.Call(context.Background(), s, "lookup", json.RawMessage(`{"q":"nats"}`), nil)
	if r.IsError {
		t.Fatalf("lookup: %s", resText(r))
	}
	b := readBundle(t, f, r.Meta.AdditionalFields["svc/receipt"].(string))
	rep := conformance.Verify(b, conformance.Options{IssuerKeys: []signer.PublicKey{f.gw.Public()}, PrincipalKeys: []signer.PublicKey{f.alice.Public()},
		LogKeys: []signer.PublicKey{logKey.Public()}, LogID: "fleet-log"})
	if !rep.Verified {
		t.Fatalf("receipt logged over NATS: first failure %q", rep.FirstFailure())
	}
	if got := svc.Sequencer("fleet").Tree().Size(); got != 2 {
		t.Fatalf("fleet log holds %d leaves, want 2 (the tool-definitions statement, the receipt)", got)
	}
}

// httpFixture is a gateway config for HTTP tests: the recording upstream, no facts, no
// grant file, a policy that permits everything.
func httpFixture(t *testing.T) *fixture {
	t.Helper()
	up := startRecordingUpstream(t)
	f := newFixture(t, func(cfg map[string]any) {
		cfg["upstream"] = map[string]any{"url": up.url}
		delete(cfg, "facts")
		delete(cfg, "grantFile")
	})
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`@id("all") permit (principal, action, resource);`), 0o644)
	return f
}

// sessionlessMeta is the _meta a client of the 2026-07-28 revision puts in params.
const sessionlessMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"modern-agent","version":"1"}}`

// postSessionless sends one JSON-RPC request as a client of the 2026-07-28 revision
// does (no session, the grant in X-Svc-Grant when given) and returns status and body.
func postSessionless(t *testing.T, url, grant, method, name, params string) (int, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"` + method + `","params":` + params + `}`
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	if grant != "" {
		req.Header.Set("X-Svc-Grant", grant)
	}
	resp, b := testkit.Send(t, req)
	return resp.StatusCode, b
}

// TestGatewayHTTPSessionlessClients: a client of the 2026-07-28 revision sends no
// initialize and no session; it presents the grant on every request, and each request
// is checked.
func TestGatewayHTTPSessionlessClients(t *testing.T) {
	f := httpFixture(t)
	g := newGateway(t, f)
	ts := httptest.NewServer(g.Handler(gateway.HTTPConfig{}))
	defer ts.Close()
	grant := f.writeGrant(t, "g.json", []string{"lookup"}, time.Now().Add(-time.Minute), time.Hour, nil)
	post := func(grant, method, name, params string) (int, string) {
		return postSessionless(t, ts.URL+"/mcp", grant, method, name, params)
	}
	meta := sessionlessMeta
	code, body := post(grantHeader(grant), "tools/list", "", `{`+meta+`}`)
	if code != 200 || !strings.Contains(body, `"lookup"`) || strings.Contains(body, `"boom"`) {
		t.Fatalf("tools/list without a session: %d %s", code, body)
	}
	code, body = post(grantHeader(grant), "tools/call", "lookup", `{"name":"lookup","arguments":{"q":"s"},`+meta+`}`)
	if code != 200 || !strings.Contains(body, `balance`) || !strings.Contains(body, `svc/receipt`) {
		t.Fatalf("tools/call without a session: %d %s", code, body)
	}
	if code, body := post("", "tools/list", "", `{`+meta+`}`); code != 403 || !strings.Contains(body, "grant rejected") {
		t.Fatalf("a sessionless request without a grant: %d %s", code, body)
	}
}

// TestGatewayHTTPSessionlessGrantCache: a sessionless client presents its grant on
// every request; the verified grant is remembered, but its validity window is checked
// at every use, and a grant that failed is never remembered.
func TestGatewayHTTPSessionlessGrantCache(t *testing.T) {
	f := httpFixture(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	cfg, err := gateway.LoadConfig(f.config)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(context.Background(), cfg, gateway.Options{LoadPolicy: gateway.CedarPolicy, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ts := httptest.NewServer(g.Handler(gateway.HTTPConfig{}))
	defer ts.Close()
	grant := f.writeGrant(t, "g.json", []string{"lookup"}, time.Now().Add(-time.Minute), time.Hour, nil)
	stranger, _ := signer.GenerateKey()
	strangerGrant, _ := receipt.SignJSON(receipt.PayloadDelegation, receipt.NewGrant("alice", "e2e-agent", []string{"lookup"}, time.Now(), time.Hour, nil, nil), stranger)
	call := func(grant *receipt.Envelope) (int, string) {
		return postSessionless(t, ts.URL+"/mcp", grantHeader(grant), "tools/call", "lookup", `{"name":"lookup","arguments":{"q":"c"},`+sessionlessMeta+`}`)
	}
	for i := range 3 {
		if code, body := call(grant); code != 200 || !strings.Contains(body, "svc/receipt") {
			t.Fatalf("call %d: %d %s", i, code, body)
		}
		if code, body := call(strangerGrant); code != 403 || !strings.Contains(body, "grant rejected") {
			t.Fatalf("stranger's grant, request %d: %d %s", i, code, body)
		}
	}
	// Padding spells the same grant (one cache entry); an oversized header is refused.
	if code, body := postSessionless(t, ts.URL+"/mcp", grantHeader(grant)+"==", "tools/call", "lookup", `{"name":"lookup","arguments":{"q":"c"},`+sessionlessMeta+`}`); code != 200 {
		t.Fatalf("the grant with padding: %d %s", code, body)
	}
	if code, body := postSessionless(t, ts.URL+"/mcp", strings.Repeat("A", 70000), "tools/call", "lookup", `{"name":"lookup","arguments":{}}`); code != 403 || !strings.Contains(body, "a grant header may have") {
		t.Fatalf("an oversized grant header: %d %s", code, body)
	}
	now.Add(int64(2 * time.Hour)) // past the grant's expiry
	if code, body := call(grant); code != 403 || !strings.Contains(body, "grant rejected") {
		t.Fatalf("an expired grant, verified before, was accepted: %d %s", code, body)
	}
}

// TestGatewayHTTPIdleSessionCloses: a session without a request for the idle time is
// closed; its id is no longer accepted and /health no longer counts it.
func TestGatewayHTTPIdleSessionCloses(t *testing.T) {
	up := startRecordingUpstream(t)
	f := newFixture(t, func(cfg map[string]any) {
		cfg["upstream"] = map[string]any{"url": up.url}
		delete(cfg, "facts")
	})
	g := newGateway(t, f)
	ts := httptest.NewServer(g.Handler(gateway.HTTPConfig{Idle: 300 * time.Millisecond}))
	defer ts.Close()
	grant := f.writeGrant(t, "g.json", []string{"lookup"}, time.Now().Add(-time.Minute), time.Hour, nil)
	req, _ := http.NewRequest("POST", ts.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+grantHeader(grant))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, id)
	}
	sessions := func() float64 {
		r, err := http.Get(ts.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var h map[string]any
		json.NewDecoder(r.Body).Decode(&h)
		return h["sessions"].(float64)
	}
	if n := sessions(); n != 1 {
		t.Fatalf("%v sessions after initialize", n)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if n := sessions(); n != 0 {
			return fmt.Errorf("the idle session was not closed: %v sessions", n)
		}
		return nil
	})
	req, _ = http.NewRequest("POST", ts.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Authorization", "Bearer "+grantHeader(grant)) // a session id alone is not a credential
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("a request on the closed session: %d, want 404", resp.StatusCode)
	}
}

// TestGatewayExportsReceipts: with `otel` in the config, each receipt becomes one span
// at the collector, named by the tool, its trace id the receipt id.
func TestGatewayExportsReceipts(t *testing.T) {
	spans := make(chan string, 10)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		td, err := exporters.DecodeOTLP(body)
		if err != nil || r.URL.Path != "/v1/traces" {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		for _, rs := range td.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					spans <- sp.Name + " " + hex.EncodeToString(sp.TraceId)
				}
			}
		}
	}))
	defer collector.Close()
	up := startRecordingUpstream(t)
	f := newFixture(t, func(cfg map[string]any) {
		cfg["upstream"] = map[string]any{"url": up.url}
		delete(cfg, "facts")
		cfg["otel"] = map[string]any{"url": collector.URL, "serviceName": "gw-test"}
	})
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`@id("all") permit (principal, action, resource);`), 0o644)
	g := newGateway(t, f)
	grant := f.writeGrant(t, "g.json", []string{"lookup"}, time.Now().Add(-time.Minute), time.Hour, nil)
	s, _ := g.NewSession("", grant)
	r := g.Call(context.Background(), s, "lookup", json.RawMessage(`{"q":"otel"}`), nil)
	id := r.Meta.AdditionalFields["svc/receipt"].(string)
	select {
	case got := <-spans:
		if want := "lookup " + strings.ReplaceAll(id, "-", ""); got != want {
			t.Fatalf("span %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no span reached the collector")
	}
}
