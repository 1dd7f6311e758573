// Package telemetry is the log service's OpenTelemetry: the metrics operators watch
// (append latency, batch size, sequencer and projection lag, checkpoint age, witness
// lag, export backlog, refusals, HTTP requests by route and status), served at
// /metrics in Prometheus text form and optionally pushed over OTLP/HTTP, and the
// traces of the append path when a request carries a W3C trace context.
//
// docs/design/telemetry.md lists every metric: name, type, unit, labels, meaning.
//
// # One per process
//
// [Setup] builds the process's Telemetry, and the process passes it in: the log
// service's Config.Telemetry, which hands it to the HTTP front, the sequencers, the
// projections, the tenants' view and the database projections (each a Config field
// or a parameter). Every hook (methods such as [Telemetry.Batch]) is a no-op on a nil
// *Telemetry, so a component never needs to know whether telemetry is on, and a
// process (or test) without it pays one nil check per hook.
//
// # Traces
//
// Spans are recorded only under a sampled parent: the sampler is
// ParentBased(NeverSample), so an append without a traceparent header costs no span,
// and one with a sampled traceparent yields the spans "POST /append" (the HTTP
// request), "broker publish" (the request on SVC_APPEND until the sequencer's answer)
// and "sequencer commit" (in the sequencer process, from the batch's start to its
// commit), all in the caller's trace. The trace context crosses the broker as a
// traceparent header on the append request.
package telemetry
