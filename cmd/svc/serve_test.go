package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"svc.dev/svc/exporters"
)

func TestServeHelp(t *testing.T) {
	for _, h := range []string{"--help", "-h"} {
		code, out, errOut := runSvc(t, "serve", h)
		if code != 0 {
			t.Fatalf("svc serve %s: exit %d", h, code)
		}
		text := out + errOut
		for _, want := range []string{"Usage: svc serve", "Example:", "svc serve --config", "GET  /health", "POST /decide", "POST /record", "docs/sdk-config.md"} {
			if !strings.Contains(text, want) {
				t.Errorf("help lacks %q:\n%s", want, text)
			}
		}
		for _, f := range []string{"config", "port", "host", "allow-remote"} {
			if !strings.Contains(text, "\n  -"+f+" ") && !strings.Contains(text, "\n  -"+f+"\n") {
				t.Errorf("flag -%s not listed:\n%s", f, text)
			}
		}
	}
	if _, _, top := runSvc(t, "--help"); !strings.Contains(top, "  serve ") {
		t.Errorf("svc --help does not list serve:\n%s", top)
	}
}

func TestServeUsageErrors(t *testing.T) {
	dir := t.TempDir()
	checkCLIErrors(t, []cliError{
		{[]string{"serve"}, 2, "--config is required"},
		{[]string{"serve", "--config", "x.json", "extra"}, 2, "unexpected argument"},
		{[]string{"serve", "--config", "x.json", "--host", "0.0.0.0"}, 2, "not a loopback address"},
		{[]string{"serve", "--config", "x.json", "--host", "192.168.1.10"}, 2, "--allow-remote"},
		{[]string{"serve", "--config", "x.json", "--port", "70000"}, 2, "--port"},
	})
	// A config that does not parse, or names a missing key, fails at run time (exit 1)
	// naming the field.
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"identity":{"keyFile":"k.key"},"agentId":"a","framework":"f","receiptsDir":"r"}`), 0o644)
	if code, _, errOut := runSvc(t, "serve", "--config", bad, "--port", "0"); code != 1 || !strings.Contains(errOut, "neither logFile nor log") {
		t.Errorf("bad config: exit %d, stderr %q", code, errOut)
	}
	os.WriteFile(bad, []byte(`{"identity":{"keyFile":"k.key"},"agentId":"a","framework":"f","receiptsDir":"r","logFile":"l"}`), 0o644)
	if code, _, errOut := runSvc(t, "serve", "--config", bad, "--port", "0"); code != 1 || !strings.Contains(errOut, "identity.keyFile") {
		t.Errorf("missing key: exit %d, stderr %q", code, errOut)
	}
}

// writeSidecarConfig creates a key with svc keygen, a policy and a config with relative
// paths, and returns the config path and the public key.
func writeSidecarConfig(t *testing.T, dir string) (cfgPath, pubPath string) {
	t.Helper()
	mustRun(t, "keygen", "--dir", filepath.Join(dir, "keys"), "--name", "agent")
	os.WriteFile(filepath.Join(dir, "policy.cedar"), []byte(`@id("small-refunds")
permit (principal == Agent::"node-agent", action == Action::"refund", resource == Tool::"refund")
when { context.args.amount <= 100 };`), 0o644)
	cfg := map[string]any{
		"identity": map[string]any{"keyFile": "keys/agent.key"}, "agentId": "node-agent", "principalId": "alice@example.com",
		"framework": "node-fetch", "policyFile": "policy.cedar", "receiptsDir": "receipts", "logFile": "receipts.log",
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	cfgPath = filepath.Join(dir, "sidecar.json")
	os.WriteFile(cfgPath, data, 0o644)
	return cfgPath, filepath.Join(dir, "keys", "agent.pub")
}

// Language neutrality: an agent in JavaScript (Node's global fetch, no packages)
// records an executed and a denied call through `svc serve`, and `svc verify` passes
// both bundles with the SDK check.
func TestServeFromNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is required in CI for the sidecar's language-neutrality test")
		}
		t.Skip("node not installed")
	}
	dir := t.TempDir()
	cfgPath, pub := writeSidecarConfig(t, dir)
	srv, base := startBackground(t, `sidecar listening on (http://[^\s]+)\n`, 10*time.Second, "serve", "--config", cfgPath, "--port", "0")
	ctx, stderr := context.Background(), &srv.stderr

	script, _ := filepath.Abs(filepath.Join("..", "..", "sidecar", "testdata", "record.mjs"))
	nctx, ncancel := context.WithTimeout(ctx, 30*time.Second)
	defer ncancel()
	cmd := exec.CommandContext(nctx, node, script, base)
	var nodeOut, nodeErr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &nodeOut, &nodeErr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\nstdout %s\nstderr %s\nsidecar stderr %s", err, nodeOut.String(), nodeErr.String(), stderr.String())
	}
	var res struct {
		Health struct {
			AgentID string `json:"agentId"`
			KeyID   string `json:"keyid"`
			Log     struct{ Kind, Where string }
		}
		Receipts []string
	}
	if err := json.Unmarshal(nodeOut.Bytes(), &res); err != nil || len(res.Receipts) != 2 {
		t.Fatalf("node output %q: %v", nodeOut.String(), err)
	}
	if res.Health.AgentID != "node-agent" || res.Health.Log.Kind != "file" || res.Health.Log.Where != filepath.Join(dir, "receipts.log") {
		t.Errorf("health %+v", res.Health)
	}
	for i, id := range res.Receipts {
		bundle := filepath.Join(dir, "receipts", id+".json")
		code, out, errOut := runSvc(t, "verify", bundle, "--issuer-key", pub, "--log", filepath.Join(dir, "receipts.log"))
		if code != 0 {
			t.Fatalf("svc verify %s: exit %d\n%s%s", bundle, code, out, errOut)
		}
		for _, want := range []string{"PASS principal is claimed, not attested", "PASS policy decision consistent with execution", "PASS log file root matches tree head", "RESULT: VERIFIED"} {
			if !strings.Contains(out, want) {
				t.Errorf("receipt %d: verify output lacks %q:\n%s", i, want, out)
			}
		}
		if strings.Contains(out, "delegation signature") {
			t.Errorf("an SDK receipt ran the delegation checks:\n%s", out)
		}
	}
	// The second receipt records the denial and the float error.
	data, _ := os.ReadFile(filepath.Join(dir, "receipts", res.Receipts[1]+".json"))
	if !strings.Contains(string(data), `"treeHead"`) {
		t.Fatalf("bundle %s", data)
	}
	srv.stop(t, 10*time.Second)
}

// --allow-remote binds elsewhere with a warning on stderr.
func TestServeAllowRemoteWarns(t *testing.T) {
	dir := t.TempDir()
	cfgPath, _ := writeSidecarConfig(t, dir)
	srv, _ := startBackground(t, `sidecar listening on (http://[^\s]+)\n`, 10*time.Second, "serve", "--config", cfgPath, "--port", "0", "--host", "0.0.0.0", "--allow-remote")
	if !strings.Contains(srv.stderr.String(), "WARNING") || !strings.Contains(srv.stderr.String(), "no authentication") {
		t.Errorf("no warning: %q", srv.stderr.String())
	}
	srv.stop(t, 10*time.Second)
}

// Issue 17, row 12: a stop waits for the receipts still queued for export (up to
// --export-drain, default 30 s): a collector that is down for the first six seconds
// still gets the receipt recorded just before the stop, and nothing is dropped. The
// span of an SDK receipt has no svc.consumed.count (the receipt has no consumed).
func TestServeStopDrainsExports(t *testing.T) {
	start := time.Now()
	var mu sync.Mutex
	var attrs []map[string]bool
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if time.Since(start) < 6*time.Second {
			http.Error(w, "collector starting", http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		td, err := exporters.DecodeOTLP(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range td.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					m := map[string]bool{}
					for _, kv := range sp.Attributes {
						m[kv.Key] = true
					}
					attrs = append(attrs, m)
				}
			}
		}
		mu.Unlock()
		w.Write([]byte(`{}`))
	}))
	defer collector.Close()
	dir := t.TempDir()
	cfgPath, _ := writeSidecarConfig(t, dir)
	var cfg map[string]any
	data, _ := os.ReadFile(cfgPath)
	json.Unmarshal(data, &cfg)
	cfg["otel"] = map[string]any{"url": collector.URL}
	data, _ = json.Marshal(cfg)
	os.WriteFile(cfgPath, data, 0o644)
	srv, base := startBackground(t, `sidecar listening on (http://[^\s]+)\n`, 10*time.Second, "serve", "--config", cfgPath, "--port", "0")
	stderr := &srv.stderr
	resp, err := http.Post(base+"/record", "application/json", strings.NewReader(`{"event":{"tool":"refund","args":{"amount":5}},"outcome":{"status":"executed","result":"ok"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/record: %d", resp.StatusCode)
	}
	srv.cancel() // SIGTERM
	select {
	case <-srv.done:
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not stop")
	}
	if strings.Contains(stderr.String(), "dropped") {
		t.Fatalf("an export was dropped at stop:\n%s", stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attrs) != 1 {
		t.Fatalf("%d spans reached the collector, want 1\n%s", len(attrs), stderr.String())
	}
	if attrs[0]["svc.consumed.count"] {
		t.Fatal("the SDK receipt's span carries svc.consumed.count though the receipt has no consumed")
	}
}
