package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/metric"
)

// instruments are the synchronous instruments; the observable gauges are read from
// gaugeState by observe (gauges.go). docs/design/telemetry.md describes each.
type instruments struct {
	appendDuration metric.Float64Histogram // svc.append.duration
	refusals       metric.Int64Counter     // svc.append.refusals
	httpRequests   metric.Int64Counter     // svc.http.requests
	httpDuration   metric.Float64Histogram // svc.http.duration
	batchSize      metric.Int64Histogram   // svc.sequencer.batch.size
	commitDuration metric.Float64Histogram // svc.sequencer.batch.duration
	wait           metric.Float64Histogram // svc.sequencer.wait
	leaves         metric.Int64Counter     // svc.sequencer.leaves
	leasesLost     metric.Int64Counter     // svc.sequencer.leases.lost
	startRefused   metric.Int64Counter     // svc.sequencer.starts.refused
	halted         metric.Int64Counter     // svc.sequencer.halted
	brokerRetries  metric.Int64Counter     // svc.broker.retries
	toolChanges    metric.Int64Counter     // svc.gateway.tool_definitions.changes
}

// latencyBuckets (seconds) resolve the sub-millisecond appends of a local broker and
// the seconds of a struggling one.
var latencyBuckets = []float64{0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}

func (in *instruments) init(m metric.Meter, t *Telemetry) error {
	var errs []error
	hist := func(name, unit, desc string, b []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(b...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	in.appendDuration = hist("svc.append.duration", "s", "Time from an append request's arrival to its answer (POST /append and /add), by outcome.", latencyBuckets)
	in.refusals = counter("svc.append.refusals", "{request}", "Appends refused, by reason (quota, rate_limited, token_rate, disabled, invalid, too_large, unauthorized, unavailable).")
	in.httpRequests = counter("svc.http.requests", "{request}", "HTTP requests answered, by route pattern and status code.")
	in.httpDuration = hist("svc.http.duration", "s", "Time to answer an HTTP request, by route pattern.", latencyBuckets)
	in.commitDuration = hist("svc.sequencer.batch.duration", "s", "Time a sequencer spends on one batch: admission, the commit on SVC_LEAVES, the tree, the signed head and the answers.", latencyBuckets)
	in.wait = hist("svc.sequencer.wait", "s", "How long the oldest request of a batch waited on SVC_APPEND before its batch committed (the sequencer's lag).", latencyBuckets)
	in.leaves = counter("svc.sequencer.leaves", "{leaf}", "Leaves committed by this process's sequencers (new indices).")
	in.startRefused = counter("svc.sequencer.starts.refused", "{start}", "Starts of a tenant's sequencer or read-only tree that the broker or the disk refused (a consumer limit, a full disk): that tenant's appends get 503 until a start succeeds; /health lists the tenants.")
	in.leasesLost = counter("svc.sequencer.leases.lost", "{lease}", "Tenants whose sequencer this process lost (lease taken or not renewed in time, or fenced out) and now serves read-only as a standby, by tenant.")
	in.halted = counter("svc.sequencer.halted", "{sequencer}", "Sequencers stopped because the log of record (SVC_LEAVES) holds fewer leaves than their tree: the broker lost acknowledged leaves. /health answers 503 until the process restarts. By tenant.")
	in.brokerRetries = counter("svc.broker.retries", "{retry}", "Times a loop that reads or writes the broker (a projection, the read-only tree, the admin view, a sequencer) failed and retries with backoff instead of stopping the process, by loop. Rising while appends fail: the broker has no quorum, or this process cannot reach it.")
	in.toolChanges = counter("svc.gateway.tool_definitions.changes", "{change}", "Tool definitions an upstream changed after the gateway logged them (or that differ from their pin at start), by upstream (svc gateway).")
	var err error
	in.batchSize, err = m.Int64Histogram("svc.sequencer.batch.size", metric.WithUnit("{request}"),
		metric.WithDescription("Append requests per sequencer batch."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 16384, 65536))
	errs = append(errs, err)
	errs = append(errs, t.registerGauges(m))
	return errors.Join(errs...)
}

var bg = context.Background()
