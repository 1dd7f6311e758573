package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"svc.dev/svc/exporters"
	"svc.dev/svc/receipt"
)

// changeCollector is one HTTP server in the test taking what svc gateway sends: OTLP
// traces (JSON, the exporters' otel), OTLP metrics (protobuf, --otlp-metrics) and
// HEC events (splunk).
type changeCollector struct {
	mu      sync.Mutex
	spans   []map[string]any // attributes of each span named svc.tool_definition.changed
	hec     []exporters.HECChangeEvent
	metrics []*colmetrics.ExportMetricsServiceRequest
	srv     *httptest.Server
}

func newChangeCollector(t *testing.T) *changeCollector {
	c := &changeCollector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		defer c.mu.Unlock()
		switch r.URL.Path {
		case "/v1/traces":
			td, err := exporters.DecodeOTLP(body)
			if err != nil {
				t.Errorf("traces body: %v", err)
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, rs := range td.GetResourceSpans() {
				for _, ss := range rs.GetScopeSpans() {
					for _, sp := range ss.GetSpans() {
						if sp.GetName() == exporters.ToolChangeSpanName {
							c.spans = append(c.spans, attrMap(sp.GetAttributes()))
						}
					}
				}
			}
			_, _ = w.Write([]byte(`{}`))
		case "/v1/metrics":
			var req colmetrics.ExportMetricsServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				t.Errorf("metrics body: %v", err)
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			c.metrics = append(c.metrics, &req)
			out, _ := proto.Marshal(&colmetrics.ExportMetricsServiceResponse{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(out)
		case "/services/collector/event":
			if r.Header.Get("Authorization") != "Splunk hec-test-token" {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			sc := bufio.NewScanner(bytes.NewReader(body))
			for sc.Scan() {
				var ev exporters.HECChangeEvent
				if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Sourcetype == exporters.ToolChangeSourcetype {
					c.hec = append(c.hec, ev)
				}
			}
			_, _ = w.Write([]byte(`{"text":"Success","code":0}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func attrMap(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.IntValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = v.BoolValue
		}
	}
	return m
}

// changes is the sum of svc.gateway.tool_definitions.changes by upstream, from the
// last push that carries it (a cumulative counter).
func (c *changeCollector) changes() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out map[string]int64
	for _, req := range c.metrics {
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					if m.GetName() != "svc.gateway.tool_definitions.changes" {
						continue
					}
					out = map[string]int64{}
					for _, dp := range m.GetSum().GetDataPoints() {
						for _, a := range dp.GetAttributes() {
							if a.GetKey() == "upstream" {
								out[a.GetValue().GetStringValue()] += dp.GetAsInt()
							}
						}
					}
				}
			}
		}
	}
	return out
}

// TestToolDefinitionChangeExported: a rug pull seen by a gateway with both exporters
// and --otlp-metrics reaches a collector three ways: an OTLP span and a HEC event
// naming the upstream, the tool, both digests and the leaf of the statement that
// logged the new one, and svc.gateway.tool_definitions.changes = 1 for the upstream
// in the metrics pushed at exit. The receipts' own exports are unchanged (spans named
// after their tool).
func TestToolDefinitionChangeExported(t *testing.T) {
	c := newChangeCollector(t)
	t.Setenv("SVC_TEST_HEC_TOKEN", "hec-test-token")
	f := rugpullFixture(t, "first-seen", nil)
	var cfg map[string]any
	data, _ := os.ReadFile(f.config)
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["otel"] = map[string]any{"url": c.srv.URL}
	cfg["splunk"] = map[string]any{"url": c.srv.URL, "tokenEnv": "SVC_TEST_HEC_TOKEN"}
	f.writeConfig(cfg)
	r := runRugpull(t, f, "--otlp-metrics", c.srv.URL+"/v1/metrics") // returns after the gateway exited
	if len(r.statements) != 2 {
		t.Fatalf("%d statements, want 2", len(r.statements))
	}
	tdp, err := receipt.DecodeToolDefinitions(r.statements[1].Envelope)
	if err != nil {
		t.Fatal(err)
	}
	up, leaf := tdp.Upstream, r.statements[1].Inclusion.LeafIndex
	from, to := digestOf(echoHonest), digestOf(echoPulled)

	c.mu.Lock()
	spans, hec := c.spans, c.hec
	c.mu.Unlock()
	if len(spans) != 1 {
		t.Fatalf("%d change spans, want 1: %v", len(spans), spans)
	}
	want := map[string]any{"svc.event": "tool_definition.changed", "svc.upstream": up, "svc.tool": "echo",
		"svc.tool.previous_definition_digest": from, "svc.tool.definition_digest": to,
		"svc.log.leaf_index": int64(leaf), "svc.tool_pins": "first-seen", "svc.refused": true}
	for k, v := range want {
		if spans[0][k] != v {
			t.Errorf("span attribute %s = %v (%T), want %v", k, spans[0][k], spans[0][k], v)
		}
	}
	if len(hec) != 1 {
		t.Fatalf("%d HEC change events, want 1", len(hec))
	}
	ev := hec[0].Event
	if ev.Event != "tool_definition.changed" || ev.Upstream != up || ev.Tool != "echo" || ev.PreviousDefinitionDigest != from ||
		ev.DefinitionDigest != to || ev.LogLeafIndex == nil || *ev.LogLeafIndex != leaf || !ev.Refused || ev.ToolPins != "first-seen" {
		t.Fatalf("HEC change event %+v (leaf %v), want upstream %s echo %s → %s at leaf %d", ev, ev.LogLeafIndex, up, from, to, leaf)
	}
	if got := c.changes(); got[up] != 1 || len(got) != 1 {
		t.Fatalf("svc.gateway.tool_definitions.changes = %v, want %s: 1", got, up)
	}
}
