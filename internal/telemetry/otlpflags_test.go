package telemetry_test

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/signer"
)

// collector is an OTLP/HTTP receiver that decodes what it gets (protobuf).
type collector struct {
	t       *testing.T
	mu      sync.Mutex
	metrics []*colmetrics.ExportMetricsServiceRequest
	traces  []*coltrace.ExportTraceServiceRequest
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-protobuf" {
		c.t.Errorf("collector: %s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		http.Error(w, "want POST application/x-protobuf", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var resp proto.Message
	switch r.URL.Path {
	case "/v1/metrics":
		var req colmetrics.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			c.t.Errorf("collector: metrics body: %v", err)
		}
		c.metrics, resp = append(c.metrics, &req), &colmetrics.ExportMetricsServiceResponse{}
	case "/v1/traces":
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			c.t.Errorf("collector: traces body: %v", err)
		}
		c.traces, resp = append(c.traces, &req), &coltrace.ExportTraceServiceResponse{}
	default:
		http.NotFound(w, r)
		return
	}
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// TestOTLPFlags: `svc log --otlp-metrics --otlp-traces` pushes to a collector: on
// SIGTERM the process flushes, and the collector holds the leaves it committed and
// the three spans of the one append that carried a sampled traceparent.
func TestOTLPFlags(t *testing.T) {
	c := &collector{t: t}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	key, _ := signer.GenerateKey()
	keyPath, _, err := key.WriteKeyFiles(dir, "log")
	if err != nil {
		t.Fatal(err)
	}
	base, cmd := startLogCmd(t, nil, "--file", filepath.Join(dir, "log.jsonl"), "--key", keyPath, "--data", filepath.Join(dir, "data"),
		"--otlp-metrics", srv.URL+"/v1/metrics", "--otlp-traces", srv.URL+"/v1/traces")
	const n = 7
	for i := range n {
		if code, _, body := testkit.Do(t, http.MethodPost, base+"/append", "", leafHash(500+i)); code != http.StatusOK {
			t.Fatalf("append: %d %s", code, body)
		}
	}
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	req, _ := http.NewRequest(http.MethodPost, base+"/append", bytes.NewReader([]byte(leafHash(600))))
	req.Header.Set("traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("svc log after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("svc log did not stop within 20 s of SIGTERM")
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	var leaves int64 = -1
	for _, r := range c.metrics {
		for _, rm := range r.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					if m.GetName() == "svc.sequencer.leaves" {
						leaves = m.GetSum().GetDataPoints()[0].GetAsInt()
					}
				}
			}
		}
	}
	if leaves != n+1 {
		t.Errorf("the collector's last svc.sequencer.leaves is %d, want %d (%d pushes)", leaves, n+1, len(c.metrics))
	}
	names := map[string]bool{}
	for _, r := range c.traces {
		for _, rs := range r.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					if hex.EncodeToString(s.GetTraceId()) != traceID {
						t.Errorf("span %q in trace %x, want %s", s.GetName(), s.GetTraceId(), traceID)
					}
					names[s.GetName()] = true
				}
			}
		}
	}
	for _, want := range []string{"POST /append", "broker publish", "sequencer commit"} {
		if !names[want] {
			t.Errorf("the collector got no span %q (got %v)", want, names)
		}
	}
	if len(names) != 3 {
		t.Errorf("spans %v, want exactly the traced append's three", names)
	}
}
