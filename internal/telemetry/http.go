package telemetry

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Middleware counts every request of next by route pattern and status, times the
// appends, and, when the request carries a sampled W3C trace context (traceparent),
// makes the server span under which the append path's spans go. Wrap the handler
// whose ServeMux names the routes: the route label is the pattern the mux matched
// ("POST /t/{tenant}/append"), never the raw path, so tenants do not multiply series.
func (t *Telemetry) Middleware(next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var span trace.Span
		if t.tracers != nil && r.Header.Get("traceparent") != "" {
			ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			if trace.SpanContextFromContext(ctx).IsSampled() {
				ctx, span = t.tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
					trace.WithTimestamp(start), trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
				r = r.WithContext(ctx)
			}
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		took := time.Since(start)
		route := r.Pattern // set by the ServeMux on this very request
		if route == "" {
			route = "unmatched"
		}
		o := t.routeOptions(route, sw.status)
		t.inst.httpRequests.Add(bg, 1, o.routeStatus)
		t.inst.httpDuration.Record(bg, took.Seconds(), o.route)
		if o.append {
			t.inst.appendDuration.Record(bg, took.Seconds(), o.status)
		}
		if span != nil {
			span.SetName(route)
			span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", sw.status))
			if sw.status >= 500 {
				span.SetStatus(codes.Error, http.StatusText(sw.status))
			}
			span.End()
		}
	})
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flush, deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// routeOpts are the attribute options of one route and status, made once: building
// an attribute set sorts and allocates, which showed in the appends' CPU.
type routeOpts struct {
	routeStatus, route, status metric.MeasurementOption
	append                     bool // a POST /append or /add
}

type routeKey struct {
	route  string
	status int
}

func (t *Telemetry) routeOptions(route string, status int) *routeOpts {
	k := routeKey{route, status}
	if o, ok := t.routes.Load(k); ok {
		return o.(*routeOpts)
	}
	code := strconv.Itoa(status)
	o := &routeOpts{
		routeStatus: metric.WithAttributeSet(attrs("route", route, "status", code)),
		route:       metric.WithAttributeSet(attrs("route", route)),
		status:      metric.WithAttributeSet(attrs("status", code)),
		append:      strings.HasPrefix(route, "POST ") && (strings.HasSuffix(route, "/append") || strings.HasSuffix(route, "/add")),
	}
	// Routes are the mux's patterns and statuses a handful: the map stays small.
	t.routes.Store(k, o)
	return o
}
