package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// TestGatewayAgainstHostedLogOverQuota: a gateway whose remote log is the hosted log
// with its tenant's free allowance (10,000 appends this month) used up withholds a
// pre-committed call (the upstream never sees it) and gives the agent an error for an
// ordinary call, issuing no receipt.
func TestGatewayAgainstHostedLogOverQuota(t *testing.T) {
	ns, err := natsembed.Start(natsembed.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Password: "pw-of-tests", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	ctx := context.Background()
	st, err := store.Open(ctx, pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	logKey, _ := signer.GenerateKey()
	doc := &signer.KeyDocument{Keys: []signer.KeyEntry{logKey.Public().Entry(time.Now().Add(-time.Hour), nil)}}
	dir := t.TempDir()
	svc, err := logservice.Start(ctx, logservice.Config{
		DataDir: dir, NATSURL: natsembed.URL(ns, "pw-of-tests"), Signer: receipt.KeySigner{Key: logKey},
		Keys:          func(context.Context) (*signer.KeyDocument, error) { return doc, nil },
		CheckpointDir: filepath.Join(dir, "cp"), CheckpointEvery: time.Hour, Logger: slog.New(slog.DiscardHandler),
		Hosted: &logservice.Hosted{Store: st},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	ls := httptest.NewServer(svc.Handler())
	t.Cleanup(ls.Close)
	if _, err := svc.Admin().AddTenant(ctx, "test", "acme", ""); err != nil {
		t.Fatal(err)
	}
	token, _, err := svc.Admin().AddToken(ctx, "test", "acme", "gateway")
	if err != nil {
		t.Fatal(err)
	}
	// Use up the month's allowance over NATS (the HTTP front limits one token to 50/s).
	cl, err := pipeline.NewClient(svc.Conn(), pipeline.ClientConfig{Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	testkit.AppendHashes(t, cl, "acme", 1, 10000)
	// The HTTP front answers the 10,001st with SPEC.md's 429.
	req, _ := http.NewRequest("POST", ls.URL+"/t/acme/append", strings.NewReader(`{"leaf":"one too many"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	now := time.Now().UTC()
	nextMonth := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	ra, _ := time.ParseDuration(resp.Header.Get("Retry-After") + "s")
	if resp.StatusCode != 429 || !strings.HasPrefix(string(body), `{"error":"monthly quota reached: `) || ra < time.Until(nextMonth)-5*time.Second || ra > time.Until(nextMonth)+5*time.Second {
		t.Fatalf("the 10,001st append: %d %s Retry-After %q (next month in %s)", resp.StatusCode, body, resp.Header.Get("Retry-After"), time.Until(nextMonth))
	}

	up := startRecordingUpstream(t)
	var paid atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paid.Add(1)
		w.Write([]byte(`{"id":"pay_1"}`))
	}))
	t.Cleanup(api.Close)
	f := keyedFixture(t)
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`@id("all") permit (principal, action, resource);`), 0o644)
	t.Setenv("ACME_LOG_TOKEN", token)
	cfg := map[string]any{
		"identity": map[string]any{"keyFile": "gateway.key"},
		"upstreams": []any{
			map[string]any{"name": "kb", "url": up.url},
			map[string]any{"name": "payments", "rest": map[string]any{"baseUrl": api.URL, "tools": []any{map[string]any{"name": "create-payment", "method": "POST", "path": "/payments"}}}},
		},
		"trustedPrincipalKeys": []string{"alice.pub"},
		"policyFile":           "policy.cedar",
		"precommit":            []string{"create-payment"},
		"receiptsDir":          "receipts",
		"grantFile":            "grant.json",
		"log":                  map[string]any{"url": ls.URL + "/t/acme/append", "tokenEnv": "ACME_LOG_TOKEN", "timeoutMs": 2000},
	}
	f.writeConfig(cfg)
	f.writeGrant(t, "grant.json", []string{"lookup", "create-payment"}, time.Now().Add(-time.Minute), time.Hour, nil)
	// The real svc gateway over stdio, as an agent runs it.
	cmd, c := startStdioGateway(t, f.config)
	t.Cleanup(func() { c.Close(); cmd.Wait() })
	call := func(tool string, args map[string]any) *mcp.CallToolResult {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = tool, args
		r, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return r
	}
	r := call("create-payment", map[string]any{"amount": 100})
	if !r.IsError || !strings.HasPrefix(resText(r), "Not executed: the log did not commit the authorization") {
		t.Fatalf("pre-committed call over quota: %s", resText(r))
	}
	if paid.Load() != 0 {
		t.Fatal("the upstream saw a pre-committed call the log did not commit")
	}
	before := countReceipts(t, f)
	r = call("lookup", map[string]any{"q": "x"})
	if !r.IsError || !strings.Contains(resText(r), "already happened") || countReceipts(t, f) != before {
		t.Fatalf("ordinary call over quota: %s (receipts %d → %d)", resText(r), before, countReceipts(t, f))
	}
}
