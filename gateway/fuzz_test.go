package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/gateway"
)

// FuzzParseConfig: never panics; a config it accepts satisfies the startup rules that
// need no outside world (exactly one of upstream and upstreams, of logFile and log).
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"identity":{"keyFile":"k"},"upstream":{"command":"x"},"trustedPrincipalKeys":["p"],"policyFile":"p","receiptsDir":"r","logFile":"l"}`))
	f.Add([]byte(`{"identity":{"keyFile":"k"},"upstreams":[{"name":"a","url":"http://x"},{"name":"b","rest":{"baseUrl":"http://y","tools":[{"name":"t","method":"GET","path":"/t"}]}}],"trustedPrincipalKeys":["p"],"policyFile":"p","receiptsDir":"r","log":{"url":"http://l/append","oversize":"hash"}}`))
	f.Add([]byte(`{"identity":{"keyFile":"k"},"upstream":{"command":"x"},"upstreams":[],"precommit":["*","a"],"facts":[{"name":"f","tool":"t","args":{"a":"$args.b"},"forTools":["x"]}]}`))
	f.Add([]byte(`{"log":{"nats":"nats://x","url":"http://y","oversize":"truncate","timeoutMs":-1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := gateway.ParseConfig(data, "/cfg")
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		if (c.Upstream == nil) == (len(c.Upstreams) == 0) {
			t.Fatalf("accepted %q with both or neither of upstream and upstreams", data)
		}
		if (c.LogFile == "") == (c.Log == nil) {
			t.Fatalf("accepted %q with both or neither of logFile and log", data)
		}
		if c.Log != nil && c.Log.Oversize != "" && c.Log.Oversize != gateway.OversizeRefuse && c.Log.Oversize != gateway.OversizeHash {
			t.Fatalf("accepted log.oversize %q", c.Log.Oversize)
		}
		if c.Log != nil {
			if err := c.Log.LogConfig.Check(); err != nil {
				t.Fatalf("accepted a log the SDK refuses (%v): %q", err, data)
			}
		}
		if c.Identity.KeyFile == "" || c.PolicyFile == "" || c.ReceiptsDir == "" || len(c.TrustedPrincipalKeys) == 0 {
			t.Fatalf("accepted %q without a required field", data)
		}
	})
}

// FuzzHTTPFront: any /mcp request (method, grant header, session id, body) gets an
// answer, never a 5xx and never a panic; a request whose grant is not the trusted one
// is refused with 403 before its body matters.
func FuzzHTTPFront(f *testing.F) {
	h := startHostileGateway(f, gateway.HTTPConfig{}, nil)
	good := h.grant(f, "fuzz-agent", 24*time.Hour)
	handler := h.g.Handler(gateway.HTTPConfig{})
	initBody := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	f.Add(uint8(0), good, "", initBody)
	f.Add(uint8(0), good, "", []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":[1]}}`))
	f.Add(uint8(0), good, "", []byte("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"a\":\"\xff\"}}}"))
	f.Add(uint8(1), "", "", []byte{})
	f.Add(uint8(2), good, "no-such-session", []byte{})
	f.Add(uint8(0), good+"==", "", []byte(`not json`))
	f.Add(uint8(0), "AAAA", "", initBody)
	f.Add(uint8(3), good, "", initBody)
	methods := []string{"POST", "GET", "DELETE", "PUT"}
	f.Fuzz(func(t *testing.T, m uint8, grant, session string, body []byte) {
		method := methods[int(m)%len(methods)]
		if strings.ContainsAny(session, "\r\n\x00") {
			session = "bad"
		}
		if method == "GET" && strings.TrimSpace(session) == "" {
			session = "x" // a sessionless GET with the right grant opens a stream that ends only with the idle time
		}
		req := httptest.NewRequest(method, "/mcp", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if grant != "" {
			req.Header.Set("X-Svc-Grant", grant)
		}
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		ctx, cancel := context.WithTimeout(req.Context(), 3*time.Second)
		defer cancel()
		req = req.WithContext(ctx)
		rec := httptest.NewRecorder()
		start := time.Now()
		handler.ServeHTTP(rec, req)
		if time.Since(start) > 2500*time.Millisecond {
			t.Fatalf("%s grant %q session %q body %q: no answer for %v (%d so far)", method, grant, session, body, time.Since(start), rec.Code)
		}
		code := rec.Code
		if code >= 500 {
			t.Fatalf("%s grant %q session %q body %q: %d %s", method, grant, session, body, code, rec.Body.String())
		}
		if method == "PUT" {
			if code != http.StatusMethodNotAllowed {
				t.Fatalf("PUT: %d", code)
			}
			return
		}
		if strings.TrimRight(strings.TrimSpace(grant), "=") != strings.TrimRight(good, "=") && code != http.StatusForbidden {
			t.Fatalf("%s with grant %q: %d, want 403", method, grant, code)
		}
	})
}

// TestRemoteLogCheckedAsTheSDKChecksIt: the gateway's log is refused where the SDK's
// is (pipeline.LogConfig.Check, the one check): a zero timeout, a tokenEnv that
// cannot name a variable, a URL without a host.
func TestRemoteLogCheckedAsTheSDKChecksIt(t *testing.T) {
	base := `{"identity":{"keyFile":"k"},"upstream":{"command":"x"},"trustedPrincipalKeys":["p"],"policyFile":"p","receiptsDir":"r","log":%s}`
	if _, err := gateway.ParseConfig([]byte(fmt.Sprintf(base, `{"url":"http://l/t/a/append","tokenEnv":"SVC_TOKEN","timeoutMs":500}`)), "/cfg"); err != nil {
		t.Fatalf("a good log refused: %v", err)
	}
	for log, want := range map[string]string{
		`{"url":"http://l/t/a/append","timeoutMs":0}`:      "log.timeoutMs 0",
		`{"url":"http://l/t/a/append","tokenEnv":"1-BAD"}`: `log.tokenEnv "1-BAD"`,
		`{"url":"http://"}`:                                `log.url "http://"`,
	} {
		_, err := gateway.ParseConfig([]byte(fmt.Sprintf(base, log)), "/cfg")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("log %s: got %v, want an error naming %s", log, err, want)
		}
	}
}
