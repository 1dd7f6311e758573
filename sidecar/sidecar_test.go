package sidecar_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"svc.dev/svc/conformance"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/sdk"
	"svc.dev/svc/sidecar"
	"svc.dev/svc/signer"
)

const policyText = `@id("small-refunds")
permit (principal, action == Action::"refund", resource) when { context.args.amount <= 100 };`

type env struct {
	key  *signer.Key
	dir  string
	is   *sdk.Issuer
	srv  *httptest.Server
	base string
}

// newEnv starts a sidecar on a real loopback listener. cfg edits the config.
func newEnv(t *testing.T, edit func(map[string]any)) *env {
	t.Helper()
	dir := t.TempDir()
	key, err := signer.KeyFromSeed(bytes.Repeat([]byte{11}, 32))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := key.WriteKeyFiles(filepath.Join(dir, "keys"), "agent"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policy.cedar"), []byte(policyText), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"identity": map[string]any{"keyFile": "keys/agent.key"}, "agentId": "billing-bot", "framework": "node-agent",
		"policyFile": "policy.cedar", "receiptsDir": "receipts", "logFile": "receipts.log",
	}
	if edit != nil {
		edit(cfg)
	}
	data, _ := json.Marshal(cfg)
	path := filepath.Join(dir, "sdk.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	is, err := sdk.OpenFile(context.Background(), path, sdk.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { is.Close(context.Background()) })
	srv := httptest.NewServer(sidecar.New(is, sidecar.Options{}))
	t.Cleanup(srv.Close)
	return &env{key: key, dir: dir, is: is, srv: srv, base: srv.URL}
}

// do is a curl-like request with plain net/http.
func (e *env) do(t *testing.T, method, path, contentType, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, data := testkit.Send(t, req)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	return resp.StatusCode, []byte(data)
}

func (e *env) post(t *testing.T, path, body string) (int, []byte) {
	return e.do(t, http.MethodPost, path, "application/json", body)
}

func errorOf(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error == "" {
		t.Fatalf("error body %s is not { error }: %v", body, err)
	}
	return e.Error
}

func TestHealth(t *testing.T) {
	e := newEnv(t, nil)
	code, body := e.do(t, http.MethodGet, "/health", "", "")
	want := `{"agentId":"billing-bot","keyid":"` + e.key.KeyID() + `","log":{"kind":"file","where":"` + filepath.Join(e.dir, "receipts.log") + `"}}` + "\n"
	if code != 200 || string(body) != want {
		t.Fatalf("%d %s\nwant %s", code, body, want)
	}
}

func TestDecide(t *testing.T) {
	e := newEnv(t, nil)
	code, body := e.post(t, "/decide", `{"tool":"refund","args":{"amount":40}}`)
	var d sdk.PolicyDecision
	if code != 200 || json.Unmarshal(body, &d) != nil || d.Decision != "allow" || d.Reasons[0] != "small-refunds" || d.PolicyDigest != e.is.Policy().Digest() {
		t.Fatalf("%d %s", code, body)
	}
	code, body = e.post(t, "/decide", `{"tool":"refund","args":{"amount":12.5}}`)
	if code != 200 || !strings.Contains(string(body), `"decision":"deny"`) || !strings.Contains(string(body), "small-refunds: ") {
		t.Fatalf("float: %d %s", code, body)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "receipts")); len(ents) != 0 {
		t.Fatal("/decide recorded something")
	}
	// No policy configured: JSON null.
	np := newEnv(t, func(c map[string]any) { delete(c, "policyFile") })
	code, body = np.post(t, "/decide", `{"tool":"refund","args":{"amount":40}}`)
	if code != 200 || strings.TrimSpace(string(body)) != "null" {
		t.Fatalf("no policy: %d %s", code, body)
	}
}

func TestRecordReturnsTheBundleAsWritten(t *testing.T) {
	e := newEnv(t, nil)
	_, dec := e.post(t, "/decide", `{"tool":"refund","args":{"amount":40}}`)
	body := `{"event":{"tool":"refund","args":{"amount":40},"model":"m-1","session":{"id":"s-1","toolUseId":"tu-1"}},` +
		`"outcome":{"status":"executed","result":{"refunded":40}},"policy":` + string(dec) + `}`
	code, got := e.post(t, "/record", body)
	if code != 200 {
		t.Fatalf("%d %s", code, got)
	}
	b, err := receipt.ParseBundle(got)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := receipt.DecodeStatement(b.Envelope)
	p, _ := st.DecodePredicate()
	onDisk, err := os.ReadFile(filepath.Join(e.dir, "receipts", p.ReceiptID+".json"))
	if err != nil || !bytes.Equal(onDisk, got) {
		t.Fatalf("response differs from receipts/%s.json (%v)", p.ReceiptID, err)
	}
	rep := conformance.VerifyBytes(got, conformance.Options{IssuerKeys: []signer.PublicKey{e.key.Public()}})
	if !rep.Verified {
		t.Fatalf("%s: %+v", rep.FirstFailure(), rep.Checks)
	}
	if p.Issuer.Kind != "sdk" || p.Issuer.Framework != "node-agent" || p.Principal.Provenance != "claimed" || p.Principal.ID != nil ||
		*p.Model.ID != "m-1" || *p.Session.ID != "s-1" || *p.Session.ToolUseID != "tu-1" || p.Policy.Provenance != "claimed" {
		t.Fatalf("predicate %+v", p)
	}
}

func TestRecordMalformed400(t *testing.T) {
	e := newEnv(t, nil)
	okEvent := `{"tool":"t","args":{}}`
	cases := map[string]struct{ body, want string }{
		"not json":          {`{"event":`, "body"},
		"empty":             {``, "body is empty"},
		"array":             {`[]`, "body must be a JSON object"},
		"unknown field":     {`{"event":` + okEvent + `,"outcome":{"status":"error","error":"x"},"extra":1}`, `unknown field "extra"`},
		"no event":          {`{"outcome":{"status":"error","error":"x"}}`, "event is required"},
		"no outcome":        {`{"event":` + okEvent + `}`, "outcome is required"},
		"tool missing":      {`{"event":{"args":{}},"outcome":{"status":"error","error":"x"}}`, "event.tool is required"},
		"tool not string":   {`{"event":{"tool":1,"args":{}},"outcome":{"status":"error","error":"x"}}`, "event.tool"},
		"args missing":      {`{"event":{"tool":"t"},"outcome":{"status":"error","error":"x"}}`, "event.args is required"},
		"args not object":   {`{"event":{"tool":"t","args":"x"},"outcome":{"status":"error","error":"x"}}`, "event.args must be a JSON object"},
		"event field":       {`{"event":{"tool":"t","args":{},"agent":"x"},"outcome":{"status":"error","error":"x"}}`, `event: unknown field "agent"`},
		"session type":      {`{"event":{"tool":"t","args":{},"session":"s"},"outcome":{"status":"error","error":"x"}}`, "event.session"},
		"status missing":    {`{"event":` + okEvent + `,"outcome":{}}`, "outcome.status is required"},
		"status unknown":    {`{"event":` + okEvent + `,"outcome":{"status":"ok"}}`, `outcome.status "ok"`},
		"withheld":          {`{"event":` + okEvent + `,"outcome":{"status":"withheld","reason":"x"}}`, "withheld"},
		"result missing":    {`{"event":` + okEvent + `,"outcome":{"status":"executed"}}`, "outcome.result is required"},
		"reason missing":    {`{"event":` + okEvent + `,"outcome":{"status":"denied"}}`, "outcome.reason is required"},
		"error missing":     {`{"event":` + okEvent + `,"outcome":{"status":"error"}}`, "outcome.error is required"},
		"outcome field":     {`{"event":` + okEvent + `,"outcome":{"status":"error","error":"x","code":1}}`, `outcome: unknown field "code"`},
		"policy decision":   {`{"event":` + okEvent + `,"outcome":{"status":"error","error":"x"},"policy":{"decision":"yes","policyDigest":"` + strings.Repeat("0", 64) + `"}}`, "policy.decision"},
		"policy digest":     {`{"event":` + okEvent + `,"outcome":{"status":"error","error":"x"},"policy":{"decision":"deny"}}`, "policy.policyDigest"},
		"trailing data":     {`{"event":` + okEvent + `,"outcome":{"status":"error","error":"x"}} {}`, "unexpected data"},
		"duplicate arg key": {`{"event":{"tool":"t","args":{"a":1,"a":2}},"outcome":{"status":"error","error":"x"}}`, "event.args"},
	}
	for name, c := range cases {
		code, body := e.post(t, "/record", c.body)
		if code != 400 {
			t.Errorf("%s: status %d %s", name, code, body)
			continue
		}
		if msg := errorOf(t, body); !strings.Contains(msg, c.want) {
			t.Errorf("%s: error %q lacks %q", name, msg, c.want)
		}
	}
	for name, body := range map[string]string{"decide not json": `{`, "decide no args": `{"tool":"t"}`, "decide unknown": `{"tool":"t","args":{},"x":1}`} {
		code, resp := e.post(t, "/decide", body)
		if code != 400 {
			t.Errorf("%s: %d %s", name, code, resp)
		} else {
			errorOf(t, resp)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "receipts")); len(ents) != 0 {
		t.Fatalf("receipts written for malformed input: %d", len(ents))
	}
}

func TestBodyCap413(t *testing.T) {
	e := newEnv(t, nil)
	big := `{"event":{"tool":"t","args":{"blob":"` + strings.Repeat("x", sidecar.MaxBody) + `"}},"outcome":{"status":"error","error":"x"}}`
	for _, path := range []string{"/record", "/decide"} {
		code, body := e.post(t, path, big)
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(errorOf(t, body), "larger than 1048576 bytes") {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
}

func TestRoutes404And405And415(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct{ method, path string }{{"GET", "/"}, {"GET", "/receipts"}, {"POST", "/record/"}, {"GET", "/health/x"}, {"POST", "/verify"}} {
		code, body := e.do(t, c.method, c.path, "application/json", "{}")
		if code != 404 {
			t.Errorf("%s %s: %d", c.method, c.path, code)
		} else {
			errorOf(t, body)
		}
	}
	for _, c := range []struct{ method, path string }{{"GET", "/record"}, {"GET", "/decide"}, {"POST", "/health"}, {"DELETE", "/record"}} {
		if code, _ := e.do(t, c.method, c.path, "application/json", "{}"); code != 405 {
			t.Errorf("%s %s: %d", c.method, c.path, code)
		}
	}
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded"} {
		code, body := e.do(t, "POST", "/record", ct, `{"event":{"tool":"t","args":{}},"outcome":{"status":"error","error":"x"}}`)
		if code != 415 || !strings.Contains(errorOf(t, body), "application/json") {
			t.Errorf("Content-Type %q: %d %s", ct, code, body)
		}
	}
	if code, _ := e.do(t, "POST", "/decide", "application/json; charset=utf-8", `{"tool":"t","args":{}}`); code != 200 {
		t.Errorf("charset parameter refused: %d", code)
	}
}

// A web page in the user's browser must not be able to record receipts: foreign
// Origin and non-loopback Host (DNS rebinding) are refused.
func TestBrowserRequestsRefused(t *testing.T) {
	e := newEnv(t, nil)
	for name, h := range map[string][2]string{
		"foreign origin": {"Origin", "https://evil.example"},
		"rebound host":   {"Host", "evil.example"},
	} {
		req, _ := http.NewRequest("POST", e.base+"/record", strings.NewReader(`{"event":{"tool":"t","args":{}},"outcome":{"status":"error","error":"x"}}`))
		req.Header.Set("Content-Type", "application/json")
		if h[0] == "Host" {
			req.Host = h[1]
		} else {
			req.Header.Set(h[0], h[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("%s: %d", name, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest("GET", e.base+"/health", nil)
	req.Header.Set("Origin", "http://localhost:3000")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("loopback origin: %d", resp.StatusCode)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "receipts")); len(ents) != 0 {
		t.Fatal("a refused request recorded a receipt")
	}
}

// The log would not take the leaf: 502 naming the log and its refusal; no bundle.
func TestLogRefusal502(t *testing.T) {
	logSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":"unauthorized"}`))
	}))
	defer logSrv.Close()
	e := newEnv(t, func(c map[string]any) {
		delete(c, "logFile")
		delete(c, "policyFile") // no decision to make: the log's refusal is the point
		c["log"] = map[string]any{"url": logSrv.URL + "/t/acme/append"}
	})
	code, body := e.do(t, http.MethodGet, "/health", "", "")
	if code != 200 || !strings.Contains(string(body), `"log":{"kind":"http","where":"`+logSrv.URL+`/t/acme/append"}`) {
		t.Fatalf("health %d %s", code, body)
	}
	code, body = e.post(t, "/record", `{"event":{"tool":"t","args":{}},"outcome":{"status":"executed","result":1}}`)
	if code != http.StatusBadGateway {
		t.Fatalf("%d %s", code, body)
	}
	msg := errorOf(t, body)
	for _, want := range []string{"http log " + logSrv.URL + "/t/acme/append", "401", "unauthorized", "no receipt was written"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "receipts")); len(ents) != 0 {
		t.Fatal("a bundle was written for a refused leaf")
	}
}

func TestLoopbackHost(t *testing.T) {
	for h, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.1:8790": true, "127.9.9.9": true, "localhost": true, "LOCALHOST:1": true, "::1": true, "[::1]:8790": true,
		"0.0.0.0": false, "": false, "10.0.0.1": false, "example.com": false, "localhost.evil.com": false, "[::]:1": false,
	} {
		if got := sidecar.LoopbackHost(h); got != want {
			t.Errorf("LoopbackHost(%q) = %v", h, got)
		}
	}
}

// Issue 17, row 11: /record refuses an outcome its own verifier would reject (SPEC's
// consistency rules). Issue 29, point 12: without a decision it records policy null,
// even with a policy configured that would deny the call (the call happened; the
// sidecar does not decide on the caller's behalf).
func TestRecordConsistency(t *testing.T) {
	e := newEnv(t, nil)
	digest := e.is.Policy().Digest()
	for name, c := range map[string]struct{ outcome, decision, want string }{
		"executed under a deny": {`{"status":"executed","result":"ok"}`, "deny", "with policy.decision deny"},
		"failed under a deny":   {`{"status":"failed","result":"no"}`, "deny", "with policy.decision deny"},
		"denied under an allow": {`{"status":"denied","reason":"no"}`, "allow", "denied with policy.decision allow"},
	} {
		body := `{"event":{"tool":"refund","args":{"amount":40}},"outcome":` + c.outcome +
			`,"policy":{"decision":"` + c.decision + `","reasons":["r"],"errors":[],"policyDigest":"` + digest + `"}}`
		code, resp := e.post(t, "/record", body)
		if code != 400 || !strings.Contains(errorOf(t, resp), c.want) {
			t.Fatalf("%s: %d %s", name, code, resp)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "receipts")); len(ents) != 0 {
		t.Fatalf("%d files written for refused records", len(ents))
	}
	// No decision sent: policy null, whether the configured policy would allow the
	// call (40) or deny it (500); both are recorded and verify.
	for _, amount := range []string{"40", "500"} {
		code, resp := e.post(t, "/record", `{"event":{"tool":"refund","args":{"amount":`+amount+`}},"outcome":{"status":"executed","result":"ok"}}`)
		if code != 200 {
			t.Fatalf("amount %s, executed, no decision: %d %s", amount, code, resp)
		}
		b, err := receipt.ParseBundle(resp)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := receipt.DecodeStatement(b.Envelope)
		p, _ := st.DecodePredicate()
		if p.Policy != nil {
			t.Fatalf("amount %s: recorded policy %+v, want null (no decision was sent)", amount, p.Policy)
		}
		rep := conformance.Verify(b, conformance.Options{IssuerKeys: []signer.PublicKey{e.key.Public()}})
		if !rep.Verified {
			t.Fatalf("amount %s: does not verify: %+v", amount, rep.Checks)
		}
	}
	code, resp := e.post(t, "/record", `{"event":{"tool":"refund","args":{"amount":500}},"outcome":{"status":"denied","reason":"over the limit"}}`)
	if code != 200 || !strings.Contains(string(resp), "payload") {
		t.Fatalf("denied call without a decision: %d %s", code, resp)
	}
}
