package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"svc.dev/svc/internal/telemetry"
)

// BenchmarkMiddleware is the per-request cost of the metrics on a routed request
// (no trace context): go test -bench Middleware -benchmem ./internal/telemetry.
func BenchmarkMiddleware(b *testing.B) {
	tel, err := telemetry.Setup(telemetry.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("POST /t/{tenant}/append", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"off", mux}, {"on", tel.Middleware(mux)}} {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodPost, "/t/acme/append", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				c.h.ServeHTTP(w, req)
			}
		})
	}
}
