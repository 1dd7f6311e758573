package main

import (
	"crypto/subtle"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/telemetry"
)

// telemetryOptions are the telemetry flags of svc log and svc up.
type telemetryOptions struct {
	metrics         bool
	metricsTokenEnv string
	otlpMetrics     string
	otlpTraces      string
	hosted          bool // the database-backed server: /metrics needs the token
}

// scrapeCommand is how to read base's /metrics, working when pasted.
func (o telemetryOptions) scrapeCommand(base string) string {
	if o.metricsTokenEnv != "" {
		return fmt.Sprintf("curl -s -H \"Authorization: Bearer $%s\" %s/metrics", o.metricsTokenEnv, base)
	}
	return "curl -s " + base + "/metrics"
}

func (o *telemetryOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.metrics, "metrics", true, "serve GET /metrics (Prometheus text form) and keep the metrics of docs/design/telemetry.md; --metrics=false turns telemetry off")
	fs.StringVar(&o.metricsTokenEnv, "metrics-token-env", "", "environment `variable` holding a bearer token that GET /metrics requires; a hosted log (--db-env) serves /metrics only with it (its labels name tenants)")
	fs.StringVar(&o.otlpMetrics, "otlp-metrics", "", "also push the metrics every 15 s over OTLP/HTTP to this `URL` (e.g. http://collector:4318/v1/metrics)")
	fs.StringVar(&o.otlpTraces, "otlp-traces", "", "export the append path's spans (for requests carrying a sampled traceparent) over OTLP/HTTP to this `URL` (e.g. http://collector:4318/v1/traces)")
}

// setupTelemetry installs the process's telemetry before the log service starts
// (its components report from their first batch on); nil without --metrics.
func setupTelemetry(o telemetryOptions) (*telemetry.Telemetry, error) {
	if !o.metrics {
		if o.otlpMetrics != "" || o.otlpTraces != "" || o.metricsTokenEnv != "" {
			return nil, usagef("--metrics=false turns telemetry off: drop --otlp-metrics, --otlp-traces and --metrics-token-env")
		}
		return nil, nil
	}
	if o.metricsTokenEnv != "" {
		if token, ok := os.LookupEnv(o.metricsTokenEnv); !ok || token == "" {
			return nil, fmt.Errorf("environment variable %s (named by --metrics-token-env) is not set; set it to the token Prometheus sends", o.metricsTokenEnv)
		}
	}
	return telemetry.Setup(telemetry.Config{ServiceName: "svc-log", OTLPMetricsURL: o.otlpMetrics, OTLPTracesURL: o.otlpTraces})
}

// withTelemetry returns handler wrapped in tel, with GET /metrics beside it; handler
// as it is when tel is nil.
func withTelemetry(o telemetryOptions, tel *telemetry.Telemetry, svc *logservice.Service, handler http.Handler, logger *slog.Logger) http.Handler {
	if tel == nil {
		return handler
	}
	token := ""
	if o.metricsTokenEnv != "" {
		token = os.Getenv(o.metricsTokenEnv)
	}
	if js, err := jetstream.New(svc.Conn()); err == nil {
		tel.WatchBroker(js)
	} else {
		logger.Warn("telemetry: no JetStream context; svc.sequencer.pending and svc.export.backlog stay empty", "err", err)
	}
	metrics := tel.Handler()
	mux := http.NewServeMux()
	if o.hosted && token == "" {
		logger.Warn("GET /metrics is refused: its labels name tenants, and a hosted log serves them only with --metrics-token-env (OTLP export, if set, goes on)")
	}
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if o.hosted && token == "" {
			http.Error(w, "forbidden: this hosted log serves /metrics only with --metrics-token-env (its labels name tenants)", http.StatusForbidden)
			return
		}
		if token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "unauthorized: GET /metrics needs Authorization: Bearer <the token of --metrics-token-env>", http.StatusUnauthorized)
			return
		}
		metrics.ServeHTTP(w, r)
	})
	mux.Handle("/", tel.Middleware(handler))
	return mux
}
