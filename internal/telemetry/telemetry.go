package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config configures the process's telemetry.
type Config struct {
	// ServiceName is the resource's service.name; default "svc".
	ServiceName string
	// OTLPMetricsURL, when set, also pushes every metric over OTLP/HTTP (protobuf) to
	// this full URL (for a collector: http://collector:4318/v1/metrics) every
	// PushInterval.
	OTLPMetricsURL string
	// PushInterval is the OTLP metrics period; default 15 s, at least 100 ms.
	PushInterval time.Duration
	// OTLPTracesURL, when set, exports the append path's spans over OTLP/HTTP to this
	// full URL (http://collector:4318/v1/traces).
	OTLPTracesURL string
	// SpanProcessors receive the spans too (tests: tracetest.SpanRecorder). With
	// neither these nor OTLPTracesURL no span is made at all.
	SpanProcessors []sdktrace.SpanProcessor
}

// Telemetry is the process's meter and tracer with the log's instruments.
type Telemetry struct {
	reg     *prometheus.Registry
	meters  *sdkmetric.MeterProvider
	tracers *sdktrace.TracerProvider // nil: no spans
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	inst    instruments
	state   gaugeState
	routes  sync.Map // routeKey → *routeOpts
	reasons sync.Map // refusal reason → metric.AddOption
}

// Setup builds the telemetry of cfg. The process hands it to the log's components
// (logservice.Config.Telemetry, which passes it on); Shutdown flushes it.
func Setup(cfg Config) (*Telemetry, error) {
	if cfg.ServiceName == "" {
		cfg.ServiceName = "svc"
	}
	if cfg.PushInterval == 0 {
		cfg.PushInterval = 15 * time.Second
	}
	if cfg.PushInterval < 100*time.Millisecond {
		return nil, fmt.Errorf("telemetry: push interval %s is below 100ms", cfg.PushInterval)
	}
	for _, u := range []string{cfg.OTLPMetricsURL, cfg.OTLPTracesURL} {
		if err := checkURL(u); err != nil {
			return nil, err
		}
	}
	res := resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName))
	t := &Telemetry{reg: prometheus.NewRegistry(), prop: propagation.TraceContext{}}
	t.state.init()
	// The Go runtime's and the process's own series (go_goroutines, go_memstats_*,
	// process_resident_memory_bytes, process_open_fds …): what a tenant costs.
	t.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pe, err := otelprom.New(otelprom.WithRegisterer(t.reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(pe)}
	if cfg.OTLPMetricsURL != "" {
		me, err := otlpmetrichttp.New(context.Background(), otlpmetrichttp.WithEndpointURL(cfg.OTLPMetricsURL))
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP metrics exporter for %s: %w", cfg.OTLPMetricsURL, err)
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me, sdkmetric.WithInterval(cfg.PushInterval))))
	}
	t.meters = sdkmetric.NewMeterProvider(opts...)
	if cfg.OTLPTracesURL != "" || len(cfg.SpanProcessors) > 0 {
		topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample()))}
		if cfg.OTLPTracesURL != "" {
			te, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(cfg.OTLPTracesURL))
			if err != nil {
				return nil, fmt.Errorf("telemetry: OTLP trace exporter for %s: %w", cfg.OTLPTracesURL, err)
			}
			topts = append(topts, sdktrace.WithBatcher(te))
		}
		for _, p := range cfg.SpanProcessors {
			topts = append(topts, sdktrace.WithSpanProcessor(p))
		}
		t.tracers = sdktrace.NewTracerProvider(topts...)
		t.tracer = t.tracers.Tracer(scope)
	} else {
		t.tracer = noop.NewTracerProvider().Tracer(scope)
	}
	if err := t.inst.init(t.meters.Meter(scope), t); err != nil {
		return nil, fmt.Errorf("telemetry: instruments: %w", err)
	}
	return t, nil
}

const scope = "svc.dev/svc"

func checkURL(u string) error {
	if u == "" {
		return nil
	}
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("telemetry: OTLP endpoint %q: want an http(s) URL such as http://collector:4318/v1/metrics", u)
	}
	return nil
}

// Handler serves the metrics in Prometheus text form (GET /metrics).
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{MaxRequestsInFlight: 4, Timeout: 10 * time.Second})
}

// Shutdown pushes what is pending (OTLP) and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	errs = append(errs, t.meters.Shutdown(ctx))
	if t.tracers != nil {
		errs = append(errs, t.tracers.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// ForceFlush pushes the metrics and spans now (tests, and before exit).
func (t *Telemetry) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	errs := []error{t.meters.ForceFlush(ctx)}
	if t.tracers != nil {
		errs = append(errs, t.tracers.ForceFlush(ctx))
	}
	return errors.Join(errs...)
}

// gaugeState holds what the observable gauges report, fed by the hooks.
type gaugeState struct {
	mu          sync.Mutex
	checkpoints map[string]checkpointState // by tenant
	witnesses   map[[2]string]witnessState // by tenant, witness
	projections map[string]*projectionState
	brokers     []brokerSource
	idleTurn    atomic.Int64 // where the next scrape's checks of idle projections start
}

func (g *gaugeState) init() {
	g.checkpoints = map[string]checkpointState{}
	g.witnesses = map[[2]string]witnessState{}
	g.projections = map[string]*projectionState{}
}

func attrs(kv ...string) attribute.Set {
	a := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		a = append(a, attribute.String(kv[i], kv[i+1]))
	}
	return attribute.NewSet(a...)
}
