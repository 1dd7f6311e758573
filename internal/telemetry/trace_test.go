package telemetry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/internal/testkit"
)

// TestAppendTraced: an append carrying a sampled traceparent yields, in the caller's
// trace, the HTTP span, the broker publish under it and the sequencer's commit under
// that (the context crossed the broker on the request's headers); an append without
// one, or with an unsampled one, yields no span at all.
func TestAppendTraced(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tel, err := telemetry.Setup(telemetry.Config{SpanProcessors: []sdktrace.SpanProcessor{rec}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	l := logtest.Start(t, logtest.Options{Telemetry: tel})
	srv := httptest.NewServer(tel.Middleware(l.Service.Handler()))
	t.Cleanup(srv.Close)

	post := func(traceparent string, i int) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/append", strings.NewReader(leafHash(1000+i)))
		req.Header.Set("Authorization", "Bearer tok")
		if traceparent != "" {
			req.Header.Set("traceparent", traceparent)
		}
		if resp, body := testkit.Send(t, req); resp.StatusCode != http.StatusOK {
			t.Fatalf("append: %d %s", resp.StatusCode, body)
		}
	}
	post("", 0)
	post("00-11111111111111111111111111111111-2222222222222222-00", 1) // not sampled
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	post("00-"+traceID+"-00f067aa0ba902b7-01", 2)

	var spans map[string]sdktrace.ReadOnlySpan
	testkit.Eventually(t, 5*time.Second, func() error {
		spans = map[string]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			spans[s.Name()] = s
		}
		for _, n := range []string{"POST /append", "broker publish", "sequencer commit"} {
			if spans[n] == nil {
				return fmt.Errorf("no span %q among %d", n, len(spans))
			}
		}
		return nil
	})
	if len(rec.Ended()) != 3 {
		t.Errorf("%d spans, want 3 (untraced and unsampled appends make none)", len(rec.Ended()))
	}
	httpSpan, pub, commit := spans["POST /append"], spans["broker publish"], spans["sequencer commit"]
	for _, s := range []sdktrace.ReadOnlySpan{httpSpan, pub, commit} {
		if got := s.SpanContext().TraceID().String(); got != traceID {
			t.Errorf("span %q in trace %s, want the caller's %s", s.Name(), got, traceID)
		}
	}
	if got := httpSpan.Parent().SpanID().String(); got != "00f067aa0ba902b7" || !httpSpan.Parent().IsRemote() {
		t.Errorf("HTTP span's parent %s (remote %v), want the caller's span 00f067aa0ba902b7", got, httpSpan.Parent().IsRemote())
	}
	if pub.Parent().SpanID() != httpSpan.SpanContext().SpanID() {
		t.Error("broker publish is not under the HTTP span")
	}
	if commit.Parent().SpanID() != pub.SpanContext().SpanID() || !commit.Parent().IsRemote() {
		t.Error("sequencer commit is not under broker publish (the context did not cross the broker)")
	}
	if commit.SpanKind() != trace.SpanKindConsumer || pub.SpanKind() != trace.SpanKindProducer || httpSpan.SpanKind() != trace.SpanKindServer {
		t.Errorf("span kinds %v %v %v", httpSpan.SpanKind(), pub.SpanKind(), commit.SpanKind())
	}
}
