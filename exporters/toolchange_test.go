package exporters_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/exporters"
	"svc.dev/svc/internal/testkit"
)

// TestToolChangeBesideReceipts: with a broker (StreamSink) a tool definition change
// reaches both collectors beside the receipts: one OTLP span named
// svc.tool_definition.changed with its attributes (no svc.receipt_id; the leaf index
// absent while the log has not taken the definition) and one HEC event of sourcetype
// svc:tool_definition_change (log_leaf_index null); the receipts keep their own form
// (spans named after the tool, sourcetype svc:receipt). After Close a change is
// dropped with a line naming it.
func TestToolChangeBesideReceipts(t *testing.T) {
	c := newCollector(t)
	nc := startBroker(t)
	var stderr testkit.LockedBuffer
	s, err := exporters.NewStreamSink(context.Background(), nc, "acme", c.both(t), exporters.StreamOptions{Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	bs, ids := issueN(t, 3)
	for _, b := range bs {
		s.Export(context.Background(), b)
	}
	at := time.Date(2026, 11, 27, 7, 0, 0, 123e6, time.UTC)
	change := exporters.ToolChange{Upstream: "files", Tool: "read_file", From: strings.Repeat("a", 64), To: strings.Repeat("b", 64),
		Pins: "off", At: at}
	s.ExportToolChange(context.Background(), change)
	c.waitFor(t, ids, []string{"otel", "splunk"}, 20*time.Second)
	var spans []map[string]any
	var events []map[string]json.RawMessage
	testkit.Eventually(t, 10*time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		spans, events = nil, nil
		for _, sp := range c.spans {
			if sp.raw["name"] == exporters.ToolChangeSpanName {
				spans = append(spans, sp.raw)
			}
		}
		for _, ev := range c.events {
			if string(ev["sourcetype"]) == `"`+exporters.ToolChangeSourcetype+`"` {
				events = append(events, ev)
			}
		}
		if len(spans) == 0 || len(events) == 0 {
			return errors.New("the change has not reached both collectors yet")
		}
		return nil
	})
	if len(spans) != 1 || len(events) != 1 {
		t.Fatalf("%d change spans and %d change events, want one each", len(spans), len(events))
	}
	attrs := map[string]string{}
	for _, a := range spans[0]["attributes"].([]any) {
		kv := a.(map[string]any)
		v, _ := json.Marshal(kv["value"])
		attrs[kv["key"].(string)] = string(v)
	}
	want := map[string]string{"svc.event": `{"stringValue":"tool_definition.changed"}`, "svc.upstream": `{"stringValue":"files"}`,
		"svc.tool": `{"stringValue":"read_file"}`, "svc.tool.previous_definition_digest": `{"stringValue":"` + change.From + `"}`,
		"svc.tool.definition_digest": `{"stringValue":"` + change.To + `"}`, "svc.tool_pins": `{"stringValue":"off"}`, "svc.refused": `{"boolValue":false}`}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("span attribute %s = %s, want %s", k, attrs[k], v)
		}
	}
	if _, ok := attrs[exporters.AttrReceiptID]; ok {
		t.Errorf("a change span carries %s", exporters.AttrReceiptID)
	}
	if _, ok := attrs[exporters.AttrLogLeafIndex]; ok {
		t.Errorf("a change not yet logged carries %s", exporters.AttrLogLeafIndex)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(events[0]["event"], &body); err != nil {
		t.Fatal(err)
	}
	if string(events[0]["time"]) != "1795762800.123" || string(body["log_leaf_index"]) != "null" || string(body["tool"]) != `"read_file"` ||
		string(body["definition_digest"]) != `"`+change.To+`"` || string(body["event"]) != `"tool_definition.changed"` {
		t.Fatalf("HEC change event %s: %s", events[0]["time"], events[0]["event"])
	}
	c.mu.Lock()
	receipts := 0
	for _, ev := range c.events {
		if string(ev["sourcetype"]) == `"svc:receipt"` {
			receipts++
		}
	}
	c.mu.Unlock()
	if receipts < 3 {
		t.Fatalf("%d receipt events of sourcetype svc:receipt, want 3", receipts)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.ExportToolChange(context.Background(), change)
	if !strings.Contains(stderr.String(), "export of tool definition change tool-change:files/read_file:") || !strings.Contains(stderr.String(), "dropped: the exporter is closed") {
		t.Fatalf("stderr after a change exported once closed:\n%s", stderr.String())
	}
}
