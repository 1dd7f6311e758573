package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/testkit"

	"svc.dev/svc/conformance"
	"svc.dev/svc/exporters"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/sdk"
	"svc.dev/svc/signer"
)

// startLog runs a full log service in-process for tenant acme with token "tok". With
// natsURL it uses that NATS server instead of its own embedded one.
func startLog(t *testing.T, natsURL string) (*logservice.Service, *signer.Key) {
	t.Helper()
	key, err := signer.KeyFromSeed([]byte("log-key-log-key-log-key-log-key!"))
	if err != nil {
		t.Fatal(err)
	}
	l := logtest.Start(t, logtest.Options{NATSURL: natsURL, Key: key, Tenants: []logtest.Tenant{{ID: "acme", File: "acme.log", Token: "tok"}}})
	return l.Service, key
}

func verifyRemote(t *testing.T, rc *sdk.Receipt, issuer, log *signer.Key) {
	t.Helper()
	data, err := os.ReadFile(rc.Path)
	if err != nil {
		t.Fatal(err)
	}
	rep := conformance.VerifyBytes(data, conformance.Options{IssuerKeys: []signer.PublicKey{issuer.Public()}, LogKeys: []signer.PublicKey{log.Public()}})
	if !rep.Verified {
		t.Fatalf("%s failed: %+v", rep.FirstFailure(), rep.Checks)
	}
	if _, err := rc.Bundle.TreeHead.Verify([]signer.PublicKey{log.Public()}); err != nil {
		t.Fatalf("head not signed by the log: %v", err)
	}
}

func TestHTTPLog(t *testing.T) {
	svc, logKey := startLog(t, "")
	ts := httptest.NewServer(svc.Handler())
	defer ts.Close()
	for _, hashOnly := range []bool{false, true} {
		dir := t.TempDir()
		key, _ := writeKey(t, dir, 6)
		path := writeConfig(t, dir, map[string]any{
			"identity": map[string]any{"keyFile": "keys/agent.key"}, "agentId": "a", "framework": "f", "receiptsDir": "receipts",
			"log": map[string]any{"url": ts.URL + "/t/acme/append", "tokenEnv": "LOG_TOKEN", "hashOnly": hashOnly, "timeoutMs": 5000},
		})
		is, err := sdk.OpenFile(context.Background(), path, sdk.OpenOptions{Getenv: func(k string) (string, bool) { return "tok", k == "LOG_TOKEN" }})
		if err != nil {
			t.Fatal(err)
		}
		rc, err := is.Record(context.Background(), sdk.ToolEvent{Tool: "search", Args: json.RawMessage(`{"q":"x"}`)}, sdk.Executed("ok"), nil)
		if err != nil {
			t.Fatal(err)
		}
		verifyRemote(t, rc, key, logKey)
		is.Close(context.Background())
	}
}

// The log over the pipeline's NATS, with the exporters as durable consumers on the same
// connection.
func TestNATSLogWithDurableExports(t *testing.T) {
	ns := testkit.ListeningBroker(t)
	_, logKey := startLog(t, natsembed.URL(ns, "pw-of-tests"))

	var mu sync.Mutex
	seen := map[string]bool{}
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		td, err := exporters.DecodeOTLP(body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		for _, rs := range td.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					for _, a := range s.Attributes {
						if a.Key == exporters.AttrReceiptID {
							seen[a.Value.GetStringValue()] = true
						}
					}
				}
			}
		}
		mu.Unlock()
		w.Write([]byte(`{}`))
	}))
	defer col.Close()

	dir := t.TempDir()
	key, _ := writeKey(t, dir, 7)
	path := writeConfig(t, dir, map[string]any{
		"identity": map[string]any{"keyFile": "keys/agent.key"}, "agentId": "a", "framework": "f", "receiptsDir": "receipts",
		"log":  map[string]any{"nats": natsembed.URL(ns, "pw-of-tests"), "tenant": "acme"},
		"otel": map[string]any{"url": col.URL},
	})
	is, err := sdk.OpenFile(context.Background(), path, sdk.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer is.Close(context.Background())
	if h := is.Health(); h.Log.Kind != "nats" || h.Log.Where != natsembed.URL(ns, "xxxxx")+" tenant acme" { // the password redacted
		t.Fatalf("health %+v", h)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		rc, err := is.Record(context.Background(), sdk.ToolEvent{Tool: "search", Args: json.RawMessage(`{"i":` + string(rune('0'+i)) + `}`)}, sdk.Executed(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		verifyRemote(t, rc, key, logKey)
		ids = append(ids, rc.ID)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, id := range ids {
			if seen[id] {
				n++
			}
		}
		if n != len(ids) {
			return fmt.Errorf("collector saw %d of %d receipts", n, len(ids))
		}
		return nil
	})
}
