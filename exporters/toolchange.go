package exporters

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// ToolChange is the export record kind besides receipts: an upstream's tool whose
// definition differs from the one before it (or, at start, from its pin). The
// evidence is the tool-definitions statement in the log (docs/design/gateway.md,
// "Tool definitions"); the event is a copy that tells the operator's collector at
// once. docs/design/exports.md, "Tool definition changes", describes both wire forms.
type ToolChange struct {
	Upstream string    // the gateway config's name of the upstream
	Tool     string    // the tool's name
	From     string    // the digest before (or the pin's)
	To       string    // the digest the upstream now sends
	Leaf     *uint64   // leaf index of the statement that logged To; nil: the log has not taken it yet
	Pins     string    // the gateway's toolPins mode
	Refused  bool      // calls to the tool are refused (toolPins is not off)
	At       time.Time // when the gateway saw the change
}

// ToolChangeSourcetype is the HEC sourcetype of a tool definition change (a receipt's
// is the configured one, default svc:receipt).
const ToolChangeSourcetype = "svc:tool_definition_change"

// ToolChangeSpanName is the OTLP span name of a tool definition change (a receipt's
// span is named after its tool).
const ToolChangeSpanName = "svc.tool_definition.changed"

// Span attribute names of a tool definition change.
const (
	AttrEvent                    = "svc.event" // "tool_definition.changed"
	AttrUpstream                 = "svc.upstream"
	AttrDefinitionDigest         = "svc.tool.definition_digest"
	AttrPreviousDefinitionDigest = "svc.tool.previous_definition_digest"
	AttrToolPins                 = "svc.tool_pins"
	AttrRefused                  = "svc.refused"
)

// EventToolDefinitionChanged is the event name of a tool definition change (span
// attribute svc.event, HEC field event).
const EventToolDefinitionChanged = "tool_definition.changed"

// EventSink takes the export events that are not receipts. Queue and StreamSink
// implement it; with a broker the events still go through an in-memory queue (they
// are not receipts: the log holds their evidence, and the receipt stream's consumers
// read receipts only).
type EventSink interface {
	ExportToolChange(ctx context.Context, c ToolChange)
}

// changeID names one change, stable across re-deliveries: the collector dedupes on it.
func (c *ToolChange) changeID() string {
	return fmt.Sprintf("tool-change:%s/%s:%s->%s", c.Upstream, c.Tool, c.From, c.To)
}

// record is the export record of c.
func (c ToolChange) record() *Record {
	return &Record{Timestamp: c.At, Tool: c.Tool, Upstream: ptr(c.Upstream), Change: &c}
}

// label names a record in a stderr line.
func (r *Record) label() string {
	if r.Change != nil {
		return "tool definition change " + r.Change.changeID()
	}
	return "receipt " + r.ReceiptID
}

// changeSpan is the OTLP span of a tool definition change: trace and span ids derived
// from the change's id, a zero-length span at the time it was seen.
func changeSpan(c *ToolChange) *tracepb.Span {
	id := c.changeID()
	sum := sha256.Sum256([]byte("svc/trace/" + id))
	sid := SpanID(id)
	ts := uint64(c.At.UnixNano())
	attrs := []*commonpb.KeyValue{
		strAttr(AttrEvent, EventToolDefinitionChanged),
		strAttr(AttrUpstream, c.Upstream),
		strAttr(AttrTool, c.Tool),
		strAttr(AttrPreviousDefinitionDigest, c.From),
		strAttr(AttrDefinitionDigest, c.To),
		strAttr(AttrToolPins, c.Pins),
		{Key: AttrRefused, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: c.Refused}}},
	}
	if c.Leaf != nil {
		attrs = append(attrs, intAttr(AttrLogLeafIndex, int64(*c.Leaf)))
	}
	return &tracepb.Span{TraceId: sum[:16], SpanId: sid[:], Name: ToolChangeSpanName, Kind: tracepb.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano: ts, EndTimeUnixNano: ts, Attributes: attrs}
}

// HECChangeFields is the event body of a tool definition change; change_id makes a
// re-delivered event recognisable, log_leaf_index is null while the log has not taken
// the new definition.
type HECChangeFields struct {
	Event                    string  `json:"event"` // "tool_definition.changed"
	ChangeID                 string  `json:"change_id"`
	Upstream                 string  `json:"upstream"`
	Tool                     string  `json:"tool"`
	PreviousDefinitionDigest string  `json:"previous_definition_digest"`
	DefinitionDigest         string  `json:"definition_digest"`
	LogLeafIndex             *uint64 `json:"log_leaf_index"`
	ToolPins                 string  `json:"tool_pins"`
	Refused                  bool    `json:"refused"`
}

// HECChangeEvent is a tool definition change as sent to an HTTP Event Collector.
type HECChangeEvent struct {
	Time       json.Number     `json:"time"`
	Source     string          `json:"source"`
	Sourcetype string          `json:"sourcetype"`
	Index      string          `json:"index,omitempty"`
	Host       string          `json:"host,omitempty"`
	Event      HECChangeFields `json:"event"`
}

// ChangeEvent is the HEC event for a tool definition change.
func (s *Splunk) ChangeEvent(c *ToolChange) HECChangeEvent {
	ms := c.At.UnixMilli()
	return HECChangeEvent{
		Time:   json.Number(fmt.Sprintf("%d.%03d", ms/1000, ms%1000)),
		Source: s.source, Sourcetype: ToolChangeSourcetype, Index: s.index, Host: s.host,
		Event: HECChangeFields{Event: EventToolDefinitionChanged, ChangeID: c.changeID(), Upstream: c.Upstream, Tool: c.Tool,
			PreviousDefinitionDigest: c.From, DefinitionDigest: c.To, LogLeafIndex: c.Leaf, ToolPins: c.Pins, Refused: c.Refused},
	}
}
