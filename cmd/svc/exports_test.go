package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"svc.dev/svc/exporters"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/pipeline/consume"
	"svc.dev/svc/receipt"
	"svc.dev/svc/sdk"
	"svc.dev/svc/signer"
)

// hecCollector is a Splunk HTTP Event Collector that refuses, for good (400), events
// of the tools in refuse.
type hecCollector struct {
	mu     sync.Mutex
	refuse map[string]bool
	seen   map[string]int // receipt id -> deliveries
	tools  map[string]string
}

func (c *hecCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	dec := json.NewDecoder(strings.NewReader(string(body)))
	var evs []exporters.HECEvent
	for dec.More() {
		var ev exporters.HECEvent
		if err := dec.Decode(&ev); err != nil {
			http.Error(w, `{"text":"Invalid data format","code":6}`, http.StatusBadRequest)
			return
		}
		evs = append(evs, ev)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range evs {
		if c.refuse[ev.Event.Tool] {
			http.Error(w, `{"text":"Invalid data format","code":6}`, http.StatusBadRequest)
			return
		}
	}
	for _, ev := range evs {
		c.seen[ev.Event.ReceiptID]++
		c.tools[ev.Event.ReceiptID] = ev.Event.Tool
	}
	w.Write([]byte(`{"text":"Success","code":0}`))
}

func (c *hecCollector) count(id string) int { c.mu.Lock(); defer c.mu.Unlock(); return c.seen[id] }

// TestExportsCommand: receipts exported through the pipeline to a collector that
// refuses one tool's events for good; `svc exports` shows the status and the dead
// letter, replays a period, and, once the collector takes it, replays the dead letter.
func TestExportsCommand(t *testing.T) {
	ns := testkit.ListeningBroker(t)
	col := &hecCollector{refuse: map[string]bool{"bad-tool": true}, seen: map[string]int{}, tools: map[string]string{}}
	srv := httptest.NewServer(col)
	defer srv.Close()
	t.Setenv("HEC_TOKEN", "hec-token")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gateway.json")
	cfg := map[string]any{"log": map[string]any{"nats": natsembed.URL(ns, "pw-of-tests"), "tenant": "acme"}, "splunk": map[string]any{"url": srv.URL, "tokenEnv": "HEC_TOKEN"}}
	data, _ := json.Marshal(cfg)
	os.WriteFile(cfgPath, data, 0o644)

	// A process issues six receipts; its sink exports them through the pipeline.
	ctx := context.Background()
	nc, err := natsembed.Connect(ns, "issuer", pipeline.Credentials{URL: natsembed.URL(ns, "pw-of-tests")})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	exps, err := exporters.Build(exporters.Config{Splunk: &exporters.SplunkConfig{URL: srv.URL, TokenEnv: "HEC_TOKEN"}}, nil, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	var stderr testkit.LockedBuffer
	sink, err := exporters.NewStreamSink(ctx, nc, "acme", exps, exporters.StreamOptions{Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := signer.GenerateKey()
	log, err := receipt.OpenFileLog(filepath.Join(dir, "receipts.log"), key, "")
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	is, err := sdk.New(sdk.Settings{Key: key, AgentID: "agent", Framework: "test", Log: log, ReceiptsDir: filepath.Join(dir, "receipts"), Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, tool := range []string{"lookup", "lookup", "bad-tool", "lookup", "lookup", "lookup"} {
		rc, err := is.Record(ctx, sdk.ToolEvent{Tool: tool, Args: json.RawMessage(`{"n":` + string(rune('0'+i)) + `}`)}, sdk.Executed("ok"), nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rc.ID)
	}
	bad := ids[2]
	testkit.Eventually(t, 10*time.Second, func() error {
		for i, id := range ids {
			if i != 2 && col.count(id) != 1 {
				return fmt.Errorf("receipt %d delivered %d times", i, col.count(id))
			}
		}
		if !strings.Contains(stderr.String(), "kept in SVC_DEAD") {
			return fmt.Errorf("no dead letter yet: %s", stderr.String())
		}
		return nil
	})
	is.Close(ctx)

	// status: position 6, nothing pending, one dead letter, the last error.
	var st []consume.Status
	testkit.Eventually(t, 5*time.Second, func() error {
		code, out, errOut := runSvc(t, "exports", "status", "--config", cfgPath, "--json")
		if code != 0 {
			return fmt.Errorf("status: exit %d %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 {
			return fmt.Errorf("status %q: %v", out, err)
		}
		if s := st[0]; s.Exporter != "splunk" || s.Tenant != "acme" || s.Position != 6 || s.Backlog != 0 || s.DeadLetters != 1 || !strings.Contains(s.LastError, "400") {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	code, out, _ := runSvc(t, "exports", "status", "--config", cfgPath)
	if code != 0 || !strings.Contains(out, "splunk") || !strings.Contains(out, "dead letters") {
		t.Errorf("status table: exit %d\n%s", code, out)
	}

	// dead list names the receipt, the handler and the error.
	code, out, _ = runSvc(t, "exports", "dead", "list", "--config", cfgPath, "--json")
	var letters []consume.DeadLetter
	if err := json.Unmarshal([]byte(out), &letters); code != 0 || err != nil || len(letters) != 1 || letters[0].ReceiptID != bad || letters[0].Handler != "splunk" || !strings.Contains(letters[0].Error, "400") {
		t.Fatalf("dead list: exit %d %q", code, out)
	}

	// replay from sequence 4: receipts 4..6 again, and the refused one stays refused.
	code, out, errOut := runSvc(t, "exports", "replay", "--config", cfgPath, "--exporter", "splunk", "--since", "4")
	if code != 0 || !strings.Contains(out, "sent 3 receipts of tenant acme to splunk again") {
		t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
	}
	for i, id := range ids {
		want := map[bool]int{true: 2, false: 1}[i >= 3]
		if i == 2 {
			want = 0
		}
		if col.count(id) != want {
			t.Errorf("receipt %d: %d deliveries, want %d", i, col.count(id), want)
		}
	}
	if code, _, errOut := runSvc(t, "exports", "replay", "--config", cfgPath, "--exporter", "otel", "--since", "4"); code != 2 || !strings.Contains(errOut, "--exporter") {
		t.Errorf("replay to an unconfigured exporter: exit %d %s", code, errOut)
	}

	// dead replay while the collector still refuses: the letter stays, exit 1.
	if code, _, errOut := runSvc(t, "exports", "dead", "replay", "--config", cfgPath); code != 1 || !strings.Contains(errOut, "stay in SVC_DEAD") {
		t.Errorf("dead replay refused again: exit %d %s", code, errOut)
	}
	col.mu.Lock()
	col.refuse = map[string]bool{}
	col.mu.Unlock()
	code, out, errOut = runSvc(t, "exports", "dead", "replay", "--config", cfgPath, "--id", jsonNumber(letters[0].Seq))
	if code != 0 || !strings.Contains(out, "delivered 1 dead letters") || col.count(bad) != 1 {
		t.Fatalf("dead replay: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runSvc(t, "exports", "dead", "list", "--config", cfgPath)
	if code != 0 || !strings.Contains(out, "no dead letters") {
		t.Errorf("after dead replay: %s", out)
	}
}

func jsonNumber(n uint64) string { b, _ := json.Marshal(n); return string(b) }
