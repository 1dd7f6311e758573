package exporters_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"svc.dev/svc/exporters"
	"svc.dev/svc/receipt"
)

var digestA = strings.Repeat("ab", 32)

// fourReceipts: a pre-committed gateway receipt with every field, and SDK receipts
// that are denied (nulls everywhere), failed and error.
func fourReceipts(t *testing.T) (gw, denied, failed, errored *receipt.Bundle) {
	g := newTestIssuer(t, receipt.KindGateway)
	gw = g.issue(t, receipt.Call{
		Principal: receipt.Principal{ID: strp("alice"), KeyID: strings.Repeat("1", 64), Provenance: receipt.Attested},
		Agent:     receipt.Agent{ID: "billing-bot", Provenance: receipt.Attested},
		Session:   receipt.Session{ID: strp("sess-1"), ToolUseID: strp("tu-1"), Provenance: receipt.Claimed},
		Model:     receipt.Model{ID: strp("model-x"), Provenance: receipt.Claimed},
		Tool:      receipt.Tool{Name: "pay", Upstream: "payments", Provenance: receipt.Observed},
		Args:      json.RawMessage(`{"cents":500}`),
		Consumed:  &receipt.Consumed{FactIDs: []string{"f1", "f2"}, Provenance: receipt.Observed},
		Policy:    &receipt.Policy{Decision: "allow", Reasons: []string{"small-payments", "trusted"}, Errors: []string{}, PolicyDigest: digestA, Provenance: receipt.Observed},
	}, receipt.Execution{Status: receipt.StatusExecuted, Result: json.RawMessage(`{"paid":true}`), Provenance: receipt.Observed}, true)
	s := newTestIssuer(t, receipt.KindSDK)
	call := func(tool string) receipt.Call {
		return receipt.Call{
			Principal: receipt.Principal{Provenance: receipt.Claimed},
			Agent:     receipt.Agent{ID: "helper", Provenance: receipt.Claimed},
			Session:   receipt.Session{Provenance: receipt.Claimed},
			Model:     receipt.Model{Provenance: receipt.Claimed},
			Tool:      receipt.Tool{Name: tool, Provenance: receipt.Claimed},
		}
	}
	denied = s.issue(t, call("delete"), receipt.Execution{Status: receipt.StatusDenied, Reason: "not on a Friday", Provenance: receipt.Claimed}, false)
	failed = s.issue(t, call("fetch"), receipt.Execution{Status: receipt.StatusFailed, Result: json.RawMessage(`{"isError":true}`), Provenance: receipt.Claimed}, false)
	errored = s.issue(t, call("fetch"), receipt.Execution{Status: receipt.StatusError, Error: "connection refused", Provenance: receipt.Claimed}, false)
	return
}

func strp(s string) *string { return &s }

func exportAll(t *testing.T, c *collector, bs ...*receipt.Bundle) []string {
	t.Helper()
	q := exporters.NewQueue(c.both(t), exporters.QueueConfig{}, nil)
	var ids []string
	for _, b := range bs {
		q.Export(context.Background(), b)
		ids = append(ids, recordOf(t, b).ReceiptID)
	}
	c.waitFor(t, ids, []string{"otel", "splunk"}, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestOTLPWireFormat(t *testing.T) {
	c := newCollector(t)
	gw, denied, failed, errored := fourReceipts(t)
	exportAll(t, c, gw, denied, failed, errored)

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.hdrs {
		if h.Get("X-Api-Key") == "" && h.Get("Authorization") == "" {
			t.Errorf("request without the configured header: %v", h)
		}
	}
	spans := map[string]*spanSeen{}
	for _, s := range c.spans {
		var id string
		for _, a := range s.raw["attributes"].([]any) {
			kv := a.(map[string]any)
			if kv["key"] == exporters.AttrReceiptID {
				id = kv["value"].(map[string]any)["stringValue"].(string)
			}
		}
		spans[id] = s
	}
	want := map[*receipt.Bundle]struct {
		status  float64 // 0: no status
		message string
		attrs   map[string]any
	}{
		gw: {0, "", map[string]any{
			"svc.issuer.kind": "gateway", "svc.tool": "pay", "svc.agent": "billing-bot", "svc.principal": "alice",
			"svc.execution.status": "executed", "svc.policy.decision": "allow", "svc.policy.digest": digestA,
			"svc.log.leaf_index": int64(1), "svc.log.tree_size": int64(2), "svc.consumed.count": int64(2),
			"svc.model": "model-x", "svc.session": "sess-1",
		}},
		denied: {0, "", map[string]any{
			"svc.issuer.kind": "sdk", "svc.tool": "delete", "svc.agent": "helper", "svc.execution.status": "denied",
			"svc.log.leaf_index": int64(0), "svc.log.tree_size": int64(1),
		}},
		failed: {2, "the tool reported failure", map[string]any{
			"svc.issuer.kind": "sdk", "svc.tool": "fetch", "svc.agent": "helper", "svc.execution.status": "failed",
			"svc.log.leaf_index": int64(1), "svc.log.tree_size": int64(2),
		}},
		errored: {2, "connection refused", map[string]any{
			"svc.issuer.kind": "sdk", "svc.tool": "fetch", "svc.agent": "helper", "svc.execution.status": "error",
			"svc.log.leaf_index": int64(2), "svc.log.tree_size": int64(3),
		}},
	}
	for b, w := range want {
		r := recordOf(t, b)
		s := spans[r.ReceiptID]
		if s == nil {
			t.Fatalf("no span for %s", r.ReceiptID)
		}
		// The wire form: hex ids, integer enums, the name and times.
		tid := strings.ReplaceAll(r.ReceiptID, "-", "")
		if s.raw["traceId"] != tid || len(tid) != 32 {
			t.Errorf("traceId %v, want %s", s.raw["traceId"], tid)
		}
		sid := exporters.SpanID(r.ReceiptID)
		if s.raw["spanId"] != hex.EncodeToString(sid[:]) {
			t.Errorf("spanId %v, want %x", s.raw["spanId"], sid)
		}
		if s.raw["kind"] != float64(1) || s.raw["name"] != r.Tool {
			t.Errorf("kind %v name %v", s.raw["kind"], s.raw["name"])
		}
		ns := fmt.Sprint(time.Date(2026, 11, 22, 1, 2, 3, 456e6, time.UTC).UnixNano())
		if s.raw["startTimeUnixNano"] != ns || s.raw["endTimeUnixNano"] != ns {
			t.Errorf("times %v %v, want %s", s.raw["startTimeUnixNano"], s.raw["endTimeUnixNano"], ns)
		}
		st, hasStatus := s.raw["status"].(map[string]any)
		if w.status == 0 && hasStatus {
			t.Errorf("%s: status %v, want none (a denial is not an error)", r.Status, st)
		}
		if w.status != 0 && (st["code"] != w.status || st["message"] != w.message) {
			t.Errorf("%s: status %v, want code %v %q", r.Status, st, w.status, w.message)
		}
		// The decoded form: every svc.* attribute with its type.
		td := s.decoded.(*tracepb.TracesData)
		var span *tracepb.Span
		for _, rs := range td.ResourceSpans {
			if got := attrMap(rs.Resource.Attributes); !reflect.DeepEqual(got, map[string]any{"service.name": "agents"}) {
				t.Errorf("resource %v", got)
			}
			for _, ss := range rs.ScopeSpans {
				if ss.Scope.Name != exporters.ScopeName || ss.Scope.Version != receipt.Version {
					t.Errorf("scope %v", ss.Scope)
				}
				for _, sp := range ss.Spans {
					if hex.EncodeToString(sp.TraceId) == tid {
						span = sp
					}
				}
			}
		}
		if span == nil {
			t.Fatalf("decoded span of %s not found", r.ReceiptID)
		}
		w.attrs["svc.receipt_id"] = r.ReceiptID
		if got := attrMap(span.Attributes); !reflect.DeepEqual(got, w.attrs) {
			t.Errorf("%s attributes:\n got %v\nwant %v", r.Status, got, w.attrs)
		}
		if len(span.Attributes) != len(w.attrs) {
			t.Errorf("duplicate attributes: %v", span.Attributes)
		}
	}
	// Every SPEC attribute appears on the full receipt.
	all := attrMap(spanOf(t, c.spans, recordOf(t, gw).ReceiptID))
	for _, k := range []string{"svc.receipt_id", "svc.issuer.kind", "svc.tool", "svc.agent", "svc.principal", "svc.execution.status",
		"svc.policy.decision", "svc.policy.digest", "svc.log.leaf_index", "svc.log.tree_size", "svc.consumed.count", "svc.model", "svc.session"} {
		if _, ok := all[k]; !ok {
			t.Errorf("attribute %s missing", k)
		}
	}
}

func spanOf(t *testing.T, spans []*spanSeen, id string) []*commonpb.KeyValue {
	for _, s := range spans {
		for _, rs := range s.decoded.(*tracepb.TracesData).ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					if attrMap(sp.Attributes)["svc.receipt_id"] == id {
						return sp.Attributes
					}
				}
			}
		}
	}
	t.Fatalf("no span for %s", id)
	return nil
}

func attrMap(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = v.IntValue
		default:
			m[kv.Key] = fmt.Sprintf("unexpected %T", v)
		}
	}
	return m
}

var hecFields = []string{"receipt_id", "issuer_kind", "issuer_keyid", "tool", "upstream", "agent", "agent_provenance", "principal",
	"status", "reason", "policy_decision", "policy_digest", "policy_reasons", "args_digest", "log_leaf_index", "log_tree_size",
	"authorization_leaf_index", "consumed_count", "model", "session"}

func TestSplunkWireFormat(t *testing.T) {
	c := newCollector(t)
	gw, denied, failed, errored := fourReceipts(t)
	exportAll(t, c, gw, denied, failed, errored)
	c.mu.Lock()
	defer c.mu.Unlock()
	var hecReqs int
	for _, h := range c.hdrs {
		if a := h.Get("Authorization"); a != "" {
			hecReqs++
			if a != "Splunk hec-token" {
				t.Errorf("Authorization %q", a)
			}
		}
	}
	if hecReqs == 0 {
		t.Fatal("no HEC request carried the token")
	}
	events := map[string]map[string]json.RawMessage{}
	for _, ev := range c.events {
		var top []string
		for k := range ev {
			top = append(top, k)
		}
		sort.Strings(top)
		if !slices.Equal(top, []string{"event", "host", "index", "source", "sourcetype", "time"}) {
			t.Errorf("event keys %v", top)
		}
		if string(ev["time"]) != fmt.Sprintf("%d.456", time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC).Unix()) ||
			string(ev["source"]) != `"svc"` || string(ev["sourcetype"]) != `"svc:receipt"` || string(ev["index"]) != `"receipts"` || string(ev["host"]) != `"agent-host"` {
			t.Errorf("envelope %s %s %s %s %s", ev["time"], ev["source"], ev["sourcetype"], ev["index"], ev["host"])
		}
		var f map[string]json.RawMessage
		if err := json.Unmarshal(ev["event"], &f); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range f {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		want := slices.Clone(hecFields)
		sort.Strings(want)
		if !slices.Equal(keys, want) {
			t.Errorf("event fields %v\nwant %v", keys, want)
		}
		var id string
		json.Unmarshal(f["receipt_id"], &id)
		events[id] = f
	}
	g, d, fl, e := recordOf(t, gw), recordOf(t, denied), recordOf(t, failed), recordOf(t, errored)
	keyid := `"` + g.IssuerKeyID + `"`
	check := func(r *exporters.Record, want map[string]string) {
		t.Helper()
		f := events[r.ReceiptID]
		if f == nil {
			t.Fatalf("no event for %s", r.ReceiptID)
		}
		want["receipt_id"] = `"` + r.ReceiptID + `"`
		want["issuer_keyid"] = keyid
		want["args_digest"] = `"` + r.ArgsDigest + `"`
		for _, k := range hecFields {
			if string(f[k]) != want[k] {
				t.Errorf("%s: %s = %s, want %s", r.Status, k, f[k], want[k])
			}
		}
	}
	check(g, map[string]string{
		"issuer_kind": `"gateway"`, "tool": `"pay"`, "upstream": `"payments"`, "agent": `"billing-bot"`, "agent_provenance": `"attested"`,
		"principal": `"alice"`, "status": `"executed"`, "reason": `null`, "policy_decision": `"allow"`, "policy_digest": `"` + digestA + `"`,
		"policy_reasons": `["small-payments","trusted"]`, "log_leaf_index": `1`, "log_tree_size": `2`, "authorization_leaf_index": `0`,
		"consumed_count": `2`, "model": `"model-x"`, "session": `"sess-1"`,
	})
	nulls := func(status, tool, reason string, leaf int) map[string]string {
		return map[string]string{
			"issuer_kind": `"sdk"`, "tool": `"` + tool + `"`, "upstream": `null`, "agent": `"helper"`, "agent_provenance": `"claimed"`,
			"principal": `null`, "status": `"` + status + `"`, "reason": reason, "policy_decision": `null`, "policy_digest": `null`,
			"policy_reasons": `null`, "log_leaf_index": fmt.Sprint(leaf), "log_tree_size": fmt.Sprint(leaf + 1), "authorization_leaf_index": `null`,
			"consumed_count": `null`, "model": `null`, "session": `null`,
		}
	}
	check(d, nulls("denied", "delete", `"not on a Friday"`, 0))
	check(fl, nulls("failed", "fetch", `null`, 1))
	check(e, nulls("error", "fetch", `"connection refused"`, 2))
}

// A re-delivered export is recognisable: the same trace id, span id and HEC
// receipt_id, byte for byte the same span.
func TestExportIsIdempotentByReceiptID(t *testing.T) {
	c := newCollector(t)
	ti := newTestIssuer(t, receipt.KindSDK)
	b := ti.simple(t)
	exportAll(t, c, b)
	exportAll(t, c, b)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.spans) != 2 || len(c.events) != 2 {
		t.Fatalf("%d spans, %d events", len(c.spans), len(c.events))
	}
	if !reflect.DeepEqual(c.spans[0].raw, c.spans[1].raw) {
		t.Errorf("re-delivered span differs:\n%v\n%v", c.spans[0].raw, c.spans[1].raw)
	}
	if !reflect.DeepEqual(c.events[0], c.events[1]) {
		t.Errorf("re-delivered event differs")
	}
	if n, dup := c.countsLocked("otel"); n != 1 || dup != 2 {
		t.Errorf("otel: %d distinct, %d deliveries", n, dup)
	}
}

func (c *collector) countsLocked(which string) (int, int) {
	m := c.otlp
	if which == "splunk" {
		m = c.hec
	}
	d, mx := 0, 0
	for _, n := range m {
		d++
		mx = max(mx, n)
	}
	return d, mx
}

func TestTraceAndSpanIDs(t *testing.T) {
	id := "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
	tid := exporters.TraceID(id)
	if hex.EncodeToString(tid[:]) != "1b4e28ba2fa111d2883f0016d3cca427" {
		t.Fatalf("trace id %x", tid)
	}
	again := strings.Clone(id)
	if exporters.SpanID(id) != exporters.SpanID(again) || exporters.SpanID(id) == exporters.SpanID("other") {
		t.Fatal("span id not deterministic per receipt")
	}
	odd := exporters.TraceID("not-a-uuid")
	if odd == [16]byte{} || odd != exporters.TraceID("not-a-uuid") {
		t.Fatal("non-UUID ids need a stable non-zero trace id")
	}
}
