package gateway_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// paymentsAPI is the REST API the test serves behind the gateway.
func paymentsAPI(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != "rest-secret" {
			http.Error(w, `{"error":"no key"}`, http.StatusUnauthorized)
			return
		}
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		if body["amount"] == float64(666) {
			w.WriteHeader(http.StatusPaymentRequired)
			w.Write([]byte(`{"error":"card declined"}`))
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"id": "pay_1", "amount": body["amount"], "currency": r.URL.Query().Get("currency")})
	})
	mux.HandleFunc("POST /payments/{id}/capture", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		json.NewEncoder(w).Encode(map[string]any{"id": r.PathValue("id"), "bodyBytes": len(b), "note": r.URL.Query().Get("note")})
	})
	mux.HandleFunc("DELETE /payments/{id}", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"deleted": r.PathValue("id"), "reason": r.URL.Query().Get("reason")})
	})
	mux.HandleFunc("GET /payments/{id}", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"id": r.PathValue("id"), "status": "settled"})
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

const restPolicy = `
@id("payments-up-to-100-00")
permit (principal, action == Action::"create-payment", resource) when { context.args.amount <= 10000 };
@id("read-payments")
permit (principal, action == Action::"get-payment", resource);
`

func grantHeader(env *receipt.Envelope) string {
	data, _ := json.Marshal(env)
	return base64.RawURLEncoding.EncodeToString(data)
}

func TestGatewayHTTPWithTwoUpstreams(t *testing.T) {
	nm := nodeModules(t)
	port := freePort(t)
	ev := exec.Command("node", filepath.Join(nm, "@modelcontextprotocol", "server-everything", "dist", "index.js"), "streamableHttp")
	ev.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	testkit.StartProcess(t, ev, regexp.MustCompile(`listening on port (\d+)`))
	api := paymentsAPI(t)
	t.Setenv("UPSTREAM_TOKEN", "upstream-bearer")
	t.Setenv("PAYMENTS_KEY", "rest-secret")
	f := newFixture(t, func(cfg map[string]any) {
		delete(cfg, "upstream")
		delete(cfg, "grantFile")
		cfg["upstreams"] = []any{
			map[string]any{"name": "everything", "url": fmt.Sprintf("http://127.0.0.1:%d/mcp", port), "tokenEnv": "UPSTREAM_TOKEN"},
			map[string]any{"name": "payments", "rest": map[string]any{"baseUrl": api.URL, "headerEnv": map[string]string{"X-Api-Key": "PAYMENTS_KEY"},
				"tools": []any{
					map[string]any{"name": "create-payment", "method": "POST", "path": "/payments", "query": []string{"currency"},
						"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"amount": map[string]any{"type": "integer"}, "currency": map[string]any{"type": "string"}}}},
					map[string]any{"name": "get-payment", "method": "GET", "path": "/payments/{id}"},
				}}},
		}
	})
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(e2ePolicy+restPolicy), 0o644)
	addr := testkit.StartProcess(t, exec.Command(svcBin, "gateway", "--config", f.config, "--http", "--port", "0"), regexp.MustCompile(`msg="gateway listening" addr=(\S+)`))
	url := "http://" + addr + "/mcp"
	scopes := []string{"echo", "create-payment", "get-payment"}
	grant := f.writeGrant(t, "http-grant.json", scopes, time.Now().Add(-time.Minute), time.Hour, nil)
	run := runAgent(t, map[string]any{"transport": "http", "url": url, "grant": grantHeader(grant), "calls": []any{
		map[string]any{"name": "echo", "arguments": map[string]any{"message": "over http"}},
		map[string]any{"name": "create-payment", "arguments": map[string]any{"amount": 2500, "currency": "EUR"}},
		map[string]any{"name": "create-payment", "arguments": map[string]any{"amount": 666}},
		map[string]any{"name": "get-payment", "arguments": map[string]any{"id": "pay_1"}},
		map[string]any{"name": "create-payment", "arguments": map[string]any{"amount": 20000}},
		map[string]any{"name": "get-sum", "arguments": map[string]any{"a": 1, "b": 2}},
	}})
	if run.ConnectError != "" {
		t.Fatalf("connect: %s", run.ConnectError)
	}
	if want := []string{"create-payment", "echo", "get-payment"}; !slices.Equal(run.Tools, want) {
		t.Fatalf("tools %v, want %v", run.Tools, want)
	}
	r := run.Results
	if text(r[0]) != "Echo: over http" || r[0].IsError {
		t.Fatalf("echo: %+v", r[0])
	}
	if r[1].IsError || !strings.Contains(text(r[1]), `"currency":"EUR"`) {
		t.Fatalf("create-payment: %+v", r[1])
	}
	if !r[2].IsError || !strings.Contains(text(r[2]), "402") || !strings.Contains(text(r[2]), "card declined") {
		t.Fatalf("a non-2xx REST answer is a failed call carrying the API's answer: %+v", r[2])
	}
	if r[3].IsError || !strings.Contains(text(r[3]), "settled") {
		t.Fatalf("get-payment: %+v", r[3])
	}
	if !strings.HasPrefix(text(r[4]), "Denied by policy: no policy permits this call (receipt ") {
		t.Fatalf("over the limit: %+v", r[4])
	}
	if !strings.HasPrefix(text(r[5]), "Denied by policy: outside delegated scope (receipt ") {
		t.Fatalf("ungranted tool: %+v", r[5])
	}
	waitForReceipts(t, f, 6) // written behind the calls, a moment after each returns
	reports := verifyAll(t, f)
	if len(reports) != 6 {
		t.Fatalf("%d receipts", len(reports))
	}
	failedID := receiptID(t, r[2])
	b, _ := receipt.ReadBundle(filepath.Join(f.dir, "receipts", failedID+".json"))
	st, _ := receipt.DecodeStatement(b.Envelope)
	p, _ := st.DecodePredicate()
	if p.Execution.Status != receipt.StatusFailed || p.Tool.Upstream != "payments" {
		t.Fatalf("REST failure receipt: status %s upstream %q", p.Execution.Status, p.Tool.Upstream)
	}
	// A chained grant: alice → agent-a → e2e-agent.
	agentA, _ := signer.GenerateKey()
	pa := agentA.Public()
	parent, _ := receipt.SignJSON(receipt.PayloadDelegation, receipt.NewGrant("alice", "agent-a", scopes, time.Now().Add(-time.Hour), 2*time.Hour, &pa, nil), f.alice)
	child, _ := receipt.SignJSON(receipt.PayloadDelegation, receipt.NewGrant("alice", "e2e-agent", []string{"echo"}, time.Now().Add(-time.Minute), time.Hour, nil, parent), agentA)
	run = runAgent(t, map[string]any{"transport": "http", "url": url, "grant": grantHeader(child), "calls": []any{
		map[string]any{"name": "echo", "arguments": map[string]any{"message": "from a sub-agent"}}}})
	if run.ConnectError != "" || len(run.Tools) != 1 || text(run.Results[0]) != "Echo: from a sub-agent" {
		t.Fatalf("chained grant: %+v", run)
	}
	waitForReceipts(t, f, 7)
	rep := verifyAll(t, f)[receiptID(t, run.Results[0])]
	if !strings.Contains(rep, "PASS delegation chain to the principal") || !strings.Contains(rep, "RESULT: VERIFIED") {
		t.Fatalf("chained receipt:\n%s", rep)
	}
	// Bad grants get 403 with the JSON-RPC error body.
	stranger, _ := signer.GenerateKey()
	strangerGrant, _ := receipt.SignJSON(receipt.PayloadDelegation, receipt.NewGrant("alice", "e2e-agent", scopes, time.Now(), time.Hour, nil, nil), stranger)
	expired, _ := receipt.SignJSON(receipt.PayloadDelegation, receipt.NewGrant("alice", "e2e-agent", scopes, time.Now().Add(-3*time.Hour), time.Hour, nil, nil), f.alice)
	for name, g := range map[string]string{"stranger": grantHeader(strangerGrant), "expired": grantHeader(expired), "missing": ""} {
		run := runAgent(t, map[string]any{"transport": "http", "url": url, "grant": g})
		if !strings.Contains(run.ConnectError, "grant rejected") {
			t.Fatalf("%s grant: the client connected or failed otherwise: %+v", name, run)
		}
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if g != "" {
			req.Header.Set("Authorization", "Bearer "+g)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			JSONRPC string `json:"jsonrpc"`
			Error   struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
			ID any `json:"id"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 403 || body.JSONRPC != "2.0" || body.Error.Code != -32000 || body.ID != nil || !strings.Contains(body.Error.Message, "grant rejected") {
			t.Fatalf("%s grant: %d %+v", name, resp.StatusCode, body)
		}
	}
	resp, err := http.Get("http://" + addr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if h["ok"] != true || h["keyid"] != f.gw.KeyID() {
		t.Fatalf("/health: %v", h)
	}
	if _, ok := h["sessions"].(float64); !ok {
		t.Fatalf("/health sessions: %v", h)
	}
}
