package exporters_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"svc.dev/svc/exporters"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// testIssuer makes real receipts: signed, logged in a local log file, written.
type testIssuer struct {
	key *signer.Key
	is  *receipt.Issuer
	n   atomic.Int64
}

func newTestIssuer(t testing.TB, kind string) *testIssuer {
	t.Helper()
	key, err := signer.KeyFromSeed(bytes.Repeat([]byte{2}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return &testIssuer{key: key, is: testkit.FileIssuer(t, receipt.IssuerConfig{Key: key, Kind: kind, Framework: "test",
		Now: func() time.Time { return time.Date(2026, 11, 22, 1, 2, 3, 456e6, time.UTC) }})}
}

func (ti *testIssuer) issue(t testing.TB, call receipt.Call, exec receipt.Execution, authorize bool) *receipt.Bundle {
	t.Helper()
	p, err := ti.is.Begin(call)
	if err != nil {
		t.Fatal(err)
	}
	if authorize {
		if err := ti.is.Authorize(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	b, err := ti.is.Finish(context.Background(), p, exec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// simple issues a plain SDK receipt numbered i.
func (ti *testIssuer) simple(t testing.TB) *receipt.Bundle {
	i := ti.n.Add(1)
	return ti.issue(t, receipt.Call{
		Principal: receipt.Principal{Provenance: receipt.Claimed},
		Agent:     receipt.Agent{ID: "agent", Provenance: receipt.Claimed},
		Session:   receipt.Session{Provenance: receipt.Claimed},
		Model:     receipt.Model{Provenance: receipt.Claimed},
		Tool:      receipt.Tool{Name: "search", Provenance: receipt.Claimed},
		Args:      json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
	}, receipt.Execution{Status: receipt.StatusExecuted, Result: json.RawMessage(`"ok"`), Provenance: receipt.Claimed}, false)
}

func recordOf(t testing.TB, b *receipt.Bundle) *exporters.Record {
	t.Helper()
	r, err := exporters.FromBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// collector stands in for an OTLP collector and a Splunk HEC (parties we cannot run
// here). It decodes every request strictly, counts deliveries per receipt id, and can
// be taken down (503) or made to refuse a receipt for good (400).
type collector struct {
	t      testing.TB
	srv    *httptest.Server
	down   atomic.Bool
	delay  time.Duration
	mu     sync.Mutex
	reject map[string]bool
	otlp   map[string]int // receipt id -> accepted deliveries
	hec    map[string]int
	spans  []*spanSeen
	events []map[string]json.RawMessage
	hdrs   []http.Header
	reqs   atomic.Int64
	// inflight counts requests being handled
	inflight atomic.Int64
}

type spanSeen struct {
	raw      map[string]any // the span as JSON, ids as sent
	resource map[string]any
	decoded  any
}

func newCollector(t testing.TB) *collector {
	c := &collector{t: t, reject: map[string]bool{}, otlp: map[string]int{}, hec: map[string]int{}}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) serve(w http.ResponseWriter, r *http.Request) {
	c.reqs.Add(1)
	c.inflight.Add(1)
	defer c.inflight.Add(-1)
	body, _ := io.ReadAll(r.Body)
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
	if c.down.Load() {
		http.Error(w, `{"error":"collector restarting"}`, http.StatusServiceUnavailable)
		return
	}
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "want POST application/json", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hdrs = append(c.hdrs, r.Header.Clone())
	switch r.URL.Path {
	case "/v1/traces":
		td, err := exporters.DecodeOTLP(body)
		if err != nil {
			c.t.Errorf("OTLP body does not decode into the official types: %v\n%s", err, body)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var raw struct {
			ResourceSpans []struct {
				Resource   map[string]any `json:"resource"`
				ScopeSpans []struct {
					Spans []map[string]any `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(body, &raw); err != nil {
			c.t.Errorf("OTLP body: %v", err)
		}
		var ids []string
		for _, rs := range td.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					for _, a := range s.Attributes {
						if a.Key == exporters.AttrReceiptID {
							ids = append(ids, a.Value.GetStringValue())
						}
					}
				}
			}
		}
		for _, id := range ids {
			if c.reject[id] {
				http.Error(w, "bad span "+id, http.StatusBadRequest)
				return
			}
		}
		for _, id := range ids {
			c.otlp[id]++
		}
		for _, rs := range raw.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					c.spans = append(c.spans, &spanSeen{raw: s, resource: rs.Resource, decoded: td})
				}
			}
		}
		w.Write([]byte(`{}`))
	case "/services/collector/event":
		dec := json.NewDecoder(bytes.NewReader(body))
		var evs []map[string]json.RawMessage
		for dec.More() {
			var ev map[string]json.RawMessage
			if err := dec.Decode(&ev); err != nil {
				http.Error(w, `{"text":"Invalid data format","code":6}`, http.StatusBadRequest)
				return
			}
			evs = append(evs, ev)
		}
		var ids []string
		for _, ev := range evs {
			var f struct {
				ReceiptID string `json:"receipt_id"`
			}
			json.Unmarshal(ev["event"], &f)
			if c.reject[f.ReceiptID] {
				http.Error(w, `{"text":"Invalid data format","code":6}`, http.StatusBadRequest)
				return
			}
			ids = append(ids, f.ReceiptID)
		}
		for _, id := range ids {
			c.hec[id]++
		}
		c.events = append(c.events, evs...)
		w.Write([]byte(`{"text":"Success","code":0}`))
	default:
		http.NotFound(w, r)
	}
}

// counts returns, for one exporter, how many distinct ids arrived and the largest
// number of deliveries of any one.
func (c *collector) counts(which string) (distinct, maxDup int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.otlp
	if which == "splunk" {
		m = c.hec
	}
	for _, n := range m {
		distinct++
		maxDup = max(maxDup, n)
	}
	return distinct, maxDup
}

func (c *collector) has(which string, ids []string) (missing []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.otlp
	if which == "splunk" {
		m = c.hec
	}
	for _, id := range ids {
		if m[id] == 0 {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	return missing
}

// waitFor polls until every id reached both exporters or the deadline passes.
func (c *collector) waitFor(t testing.TB, ids []string, which []string, within time.Duration) {
	t.Helper()
	testkit.Eventually(t, within, func() error {
		var missing []string
		for _, w := range which {
			missing = append(missing, c.has(w, ids)...)
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d deliveries missing, e.g. %v", len(missing), missing[:min(3, len(missing))])
		}
		return nil
	})
}

// both builds the two exporters against c.
func (c *collector) both(t testing.TB) []exporters.Exporter {
	t.Helper()
	exps, err := exporters.Build(exporters.Config{
		OTel:   &exporters.OTelConfig{URL: c.srv.URL, HeadersEnv: map[string]string{"X-Api-Key": "TEST_OTEL_KEY"}, ServiceName: "agents"},
		Splunk: &exporters.SplunkConfig{URL: c.srv.URL + "/", TokenEnv: "TEST_HEC_TOKEN", Index: "receipts", Host: "agent-host"},
	}, nil, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	return exps
}

func testEnv(k string) (string, bool) {
	v, ok := map[string]string{"TEST_OTEL_KEY": "otel-secret", "TEST_HEC_TOKEN": "hec-token"}[k]
	return v, ok
}

// startBroker runs an embedded nats-server with JetStream for the test and returns a
// connection to it; both are closed when the test ends.
func startBroker(t testing.TB) *nats.Conn {
	t.Helper()
	nc, _ := testkit.Broker(t)()
	return nc
}
