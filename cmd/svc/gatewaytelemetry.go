package main

import (
	"context"
	"log/slog"
	"time"

	"svc.dev/svc/internal/telemetry"
)

// gatewayTelemetry is svc gateway's telemetry: with --otlp-metrics its metrics
// (docs/design/telemetry.md, "svc gateway") are pushed over OTLP/HTTP; without it,
// nil (the gateway keeps no metrics: a stdio gateway has no port to serve them on).
func gatewayTelemetry(otlpMetrics string) (*telemetry.Telemetry, error) {
	if otlpMetrics == "" {
		return nil, nil
	}
	return telemetry.Setup(telemetry.Config{ServiceName: "svc-gateway", OTLPMetricsURL: otlpMetrics})
}

// flushTelemetry pushes the last metrics at exit (after the gateway closed), for at
// most 5 s: a collector that does not answer costs a line on stderr, not a hang.
func flushTelemetry(tel *telemetry.Telemetry, logger *slog.Logger) {
	if tel == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		logger.Warn("telemetry: the last push of the metrics failed", "err", err)
	}
}
