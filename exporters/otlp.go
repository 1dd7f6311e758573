package exporters

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// Span attribute names (SPEC.md, "Receipt exports").
const (
	AttrReceiptID       = "svc.receipt_id"
	AttrIssuerKind      = "svc.issuer.kind"
	AttrTool            = "svc.tool"
	AttrAgent           = "svc.agent"
	AttrPrincipal       = "svc.principal"
	AttrExecutionStatus = "svc.execution.status"
	AttrPolicyDecision  = "svc.policy.decision"
	AttrPolicyDigest    = "svc.policy.digest"
	AttrLogLeafIndex    = "svc.log.leaf_index"
	AttrLogTreeSize     = "svc.log.tree_size"
	AttrConsumedCount   = "svc.consumed.count"
	AttrModel           = "svc.model"
	AttrSession         = "svc.session"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "svc.dev/svc/exporters"

// OTLP exports one span per receipt to an OpenTelemetry collector over OTLP/HTTP
// with the JSON encoding: POST <url>/v1/traces.
type OTLP struct {
	url         string
	header      http.Header
	serviceName string
	client      *http.Client
	timeout     time.Duration
}

// NewOTLP reads the header variables named in cfg.HeadersEnv (a missing one is an
// error naming the field) and makes the exporter. getenv nil means os.LookupEnv.
func NewOTLP(cfg OTelConfig, client *http.Client, getenv func(string) (string, bool)) (*OTLP, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := http.Header{}
	for _, name := range sortedKeys(cfg.HeadersEnv) {
		v, err := pipeline.ConfigEnv(getenv, "otel.headersEnv."+name, cfg.HeadersEnv[name])
		if err != nil {
			return nil, err
		}
		h.Set(name, v)
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = DefaultServiceName
	}
	if client == nil {
		client = &http.Client{}
	}
	return &OTLP{url: join(cfg.URL, "/v1/traces"), header: h, serviceName: cfg.ServiceName, client: client, timeout: DefaultTimeout}, nil
}

// Name is "otel".
func (o *OTLP) Name() string { return "otel" }

// Send posts one request carrying a span per record. A partial success (the collector
// rejected some spans) is reported as a permanent error for those spans' batch.
func (o *OTLP) Send(ctx context.Context, recs []*Record) error {
	body, err := EncodeOTLP(o.serviceName, recs)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPermanent, err)
	}
	answer, err := post(ctx, o.client, o.timeout, o.url, o.header, body)
	if err != nil {
		return err
	}
	var resp struct {
		PartialSuccess *struct {
			RejectedSpans json.Number `json:"rejectedSpans"`
			ErrorMessage  string      `json:"errorMessage"`
		} `json:"partialSuccess"`
	}
	if json.Unmarshal(answer, &resp) == nil && resp.PartialSuccess != nil {
		if n, _ := resp.PartialSuccess.RejectedSpans.Int64(); n > 0 {
			return fmt.Errorf("%w: %s rejected %d of %d spans: %s", ErrPermanent, o.url, n, len(recs), resp.PartialSuccess.ErrorMessage)
		}
	}
	return nil
}

// Spans builds the OTLP request for recs with the official OTLP types. The value is a
// TracesData, which is field for field the collector service's
// ExportTraceServiceRequest (one repeated ResourceSpans, field 1, JSON resourceSpans).
func Spans(serviceName string, recs []*Record) *tracepb.TracesData {
	spans := make([]*tracepb.Span, 0, len(recs))
	for _, r := range recs {
		spans = append(spans, span(r))
	}
	return &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{strAttr("service.name", serviceName)}},
		ScopeSpans: []*tracepb.ScopeSpans{{
			Scope: &commonpb.InstrumentationScope{Name: ScopeName, Version: receipt.Version},
			Spans: spans,
		}},
	}}}
}

func span(r *Record) *tracepb.Span {
	if r.Change != nil {
		return changeSpan(r.Change)
	}
	tid, sid := TraceID(r.ReceiptID), SpanID(r.ReceiptID)
	ts := uint64(r.Timestamp.UnixNano())
	attrs := []*commonpb.KeyValue{
		strAttr(AttrReceiptID, r.ReceiptID),
		strAttr(AttrIssuerKind, r.IssuerKind),
		strAttr(AttrTool, r.Tool),
		strAttr(AttrAgent, r.Agent),
	}
	attrs = optAttr(attrs, AttrPrincipal, r.Principal)
	attrs = append(attrs, strAttr(AttrExecutionStatus, r.Status))
	attrs = optAttr(attrs, AttrPolicyDecision, r.PolicyDecision)
	attrs = optAttr(attrs, AttrPolicyDigest, r.PolicyDigest)
	attrs = append(attrs,
		intAttr(AttrLogLeafIndex, int64(r.LogLeafIndex)),
		intAttr(AttrLogTreeSize, int64(r.LogTreeSize)),
	)
	if r.ConsumedCount != nil {
		attrs = append(attrs, intAttr(AttrConsumedCount, int64(*r.ConsumedCount)))
	}
	attrs = optAttr(attrs, AttrModel, r.Model)
	attrs = optAttr(attrs, AttrSession, r.Session)
	s := &tracepb.Span{
		TraceId:           tid[:],
		SpanId:            sid[:],
		Name:              r.Tool,
		Kind:              tracepb.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano: ts,
		EndTimeUnixNano:   ts,
		Attributes:        attrs,
	}
	switch r.Status {
	case receipt.StatusFailed:
		s.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "the tool reported failure"}
	case receipt.StatusError:
		msg := "the tool could not be called"
		if r.Reason != nil && *r.Reason != "" {
			msg = *r.Reason
		}
		s.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: msg}
	}
	return s
}

func strAttr(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func intAttr(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

// optAttr adds a string attribute when the receipt has a value (OTLP attributes are
// never null; a null field is an absent attribute).
func optAttr(attrs []*commonpb.KeyValue, k string, v *string) []*commonpb.KeyValue {
	if v == nil {
		return attrs
	}
	return append(attrs, strAttr(k, *v))
}

// EncodeOTLP is the OTLP/HTTP JSON body for recs. It is protojson's encoding of
// Spans with the two changes the OTLP JSON encoding makes to the proto3 JSON mapping:
// traceId, spanId and parentSpanId are hex strings, not base64, and enums are
// integers.
func EncodeOTLP(serviceName string, recs []*Record) ([]byte, error) {
	pj, err := protojson.MarshalOptions{UseEnumNumbers: true}.Marshal(Spans(serviceName, recs))
	if err != nil {
		return nil, err
	}
	return rewriteIDs(pj, func(s string) (string, error) {
		raw, err := base64.StdEncoding.DecodeString(s)
		return hex.EncodeToString(raw), err
	})
}

// rewriteIDs re-encodes the string values of the id fields of an OTLP JSON document.
func rewriteIDs(doc []byte, conv func(string) (string, error)) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var walk func(v any) error
	walk = func(v any) error {
		switch t := v.(type) {
		case map[string]any:
			for k, x := range t {
				if s, ok := x.(string); ok && (k == "traceId" || k == "spanId" || k == "parentSpanId") {
					c, err := conv(s)
					if err != nil {
						return fmt.Errorf("%s %q: %w", k, s, err)
					}
					t[k] = c
					continue
				}
				if err := walk(x); err != nil {
					return err
				}
			}
		case []any:
			for _, x := range t {
				if err := walk(x); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// DecodeOTLP reads an OTLP/HTTP JSON traces body (hex ids, as EncodeOTLP writes and
// collectors expect) into the official types, strictly: an unknown field is an error.
// Tests and tools use it to read what the exporter sent.
func DecodeOTLP(body []byte) (*tracepb.TracesData, error) {
	pj, err := rewriteIDs(body, func(s string) (string, error) {
		raw, err := hex.DecodeString(s)
		return base64.StdEncoding.EncodeToString(raw), err
	})
	if err != nil {
		return nil, err
	}
	var td tracepb.TracesData
	if err := protojson.Unmarshal(pj, &td); err != nil {
		return nil, err
	}
	return &td, nil
}
