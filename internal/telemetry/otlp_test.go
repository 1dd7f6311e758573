package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"

	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/internal/testkit"
)

// TestOTLPPush: with OTLPMetricsURL the metrics reach a collector as OTLP/HTTP
// protobuf (POST <url>, Content-Type application/x-protobuf, an
// ExportMetricsServiceRequest), with the service name and the refusal counted.
func TestOTLPPush(t *testing.T) {
	var mu sync.Mutex
	var got []*colmetrics.ExportMetricsServiceRequest
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/metrics" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("collector got %s %s (%s), want POST /v1/metrics application/x-protobuf", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req colmetrics.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("body is not an ExportMetricsServiceRequest: %v", err)
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, &req)
		mu.Unlock()
		out, _ := proto.Marshal(&colmetrics.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(collector.Close)

	tel, err := telemetry.Setup(telemetry.Config{ServiceName: "svc-log-test", OTLPMetricsURL: collector.URL + "/v1/metrics", PushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	tel.Refused(telemetry.ReasonQuota)
	tel.Refused(telemetry.ReasonQuota)
	tel.Checkpoint("acme", 10, time.Now().Add(-time.Minute), func() uint64 { return 12 })
	if err := tel.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return io.ErrUnexpectedEOF
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	var service string
	metrics := map[string]*metricspb.Metric{}
	for _, req := range got {
		for _, rm := range req.GetResourceMetrics() {
			for _, a := range rm.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					metrics[m.GetName()] = m
				}
			}
		}
	}
	if service != "svc-log-test" {
		t.Errorf("service.name %q, want svc-log-test", service)
	}
	ref := metrics["svc.append.refusals"]
	if ref == nil || ref.GetSum() == nil || len(ref.GetSum().GetDataPoints()) != 1 {
		t.Fatalf("svc.append.refusals: %v", ref)
	}
	dp := ref.GetSum().GetDataPoints()[0]
	if dp.GetAsInt() != 2 || len(dp.GetAttributes()) != 1 || dp.GetAttributes()[0].GetValue().GetStringValue() != "quota" || !ref.GetSum().GetIsMonotonic() {
		t.Errorf("svc.append.refusals point %v, want a monotonic 2 with reason=quota", dp)
	}
	lag := metrics["svc.checkpoint.lag"]
	if lag == nil || lag.GetGauge() == nil || lag.GetGauge().GetDataPoints()[0].GetAsInt() != 2 {
		t.Errorf("svc.checkpoint.lag: %v, want a gauge of 2 leaves", lag)
	}
	if age := metrics["svc.checkpoint.age"]; age == nil || age.GetUnit() != "s" || age.GetGauge().GetDataPoints()[0].GetAsDouble() < 59 {
		t.Errorf("svc.checkpoint.age: %v, want about 60 s", age)
	}
}
