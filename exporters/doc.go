// Package exporters copies each receipt, after it is written, to an OpenTelemetry
// collector (OTLP/HTTP, JSON encoding) and to a Splunk HTTP Event Collector (SPEC.md,
// "Receipt exports"). The event is a copy; the receipt is the evidence. Exports never
// block or fail a receipt.
//
// # The seam
//
// An issuer holds a [Sink] and calls Export with each bundle it wrote; Export returns
// at once. [New] builds the sink from the `otel` and `splunk` fields of a gateway or SDK
// config ([Config]):
//
//   - standalone (no broker): a [Queue], one bounded in-memory queue and goroutine per
//     exporter, retrying with backoff; a receipt finally given up costs one line on
//     stderr ("svc: otel export of receipt <id> dropped: <why>");
//   - connected to the pipeline (a NATS connection): a [StreamSink], which publishes
//     each bundle to the stream SVC_RECEIPTS on svc.receipts.<tenant> (created here,
//     idempotently; Nats-Msg-Id is the receipt id) and runs each exporter on a
//     [Router] (Watermill) as the durable consumer svc-export-<exporter>-<tenant>,
//     acknowledging a message only after the collector accepted it or it was kept in
//     SVC_DEAD. A collector outage delays delivery and loses nothing, across restarts
//     too.
//
// # The router
//
// Each exporter is one Watermill handler built on the consumer kit (package
// pipeline/consume, shared with the database projections) with, outermost first:
// throttle, metrics (router.go), dead letters (mw_deadletter.go), retry with backoff
// and a per-attempt timeout. Up to
// RouterConfig.Lanes receipts are in hand at once, and the records of concurrent
// deliveries share one request to the collector (a batcher, linger 500 µs). A
// transient failure is retried in hand, then the message goes back to the stream with
// a backoff delay and is redelivered, without end: nothing is dropped. A refusal for
// good puts the receipt in SVC_DEAD (svc.dead.<exporter>.<tenant>, with the handler,
// the error and the attempts in headers) and lets the rest flow. [Status], the kit's
// ListDead and ReplayDead (with [DeadHandlers]) and [Replay] are what `svc exports`
// shows and repairs with; the last
// error of each exporter is in the key-value bucket SVC_EXPORTS.
//
// Delivery is at least once. Every export is idempotent by receipt id: the OTLP span of
// a receipt always has the same trace id (the receipt id without hyphens) and span id
// (the first 8 bytes of SHA-256 of "svc/span/" and the receipt id), and every HEC
// event carries receipt_id.
//
// # OTLP
//
// POST <url>/v1/traces, Content-Type application/json, one request per batch, one span
// per receipt, built with the official OTLP types (go.opentelemetry.io/proto/otlp) and
// encoded with protojson, then given the OTLP JSON encoding's hex trace and span ids
// and integer enums. The span's name is the tool, its kind internal, its start and end
// the receipt's timestamp; the resource carries service.name (otel.serviceName,
// default svc). Attributes: svc.receipt_id, svc.issuer.kind, svc.tool, svc.agent,
// svc.principal, svc.execution.status, svc.policy.decision, svc.policy.digest,
// svc.log.leaf_index, svc.log.tree_size, svc.consumed.count, svc.model, svc.session;
// the last three numbers are ints, the rest strings; an attribute whose receipt field
// is null or absent (a claimed principal without id, no policy, no model, no session,
// no consumed on an SDK receipt) is left out. The span status is error only for failed and error executions (a denial is not
// an error) and unset otherwise. otel.headersEnv maps a header name to the environment
// variable holding its value, read at startup: {"Authorization": "OTEL_AUTH"}.
//
// # Splunk HEC
//
// POST <url>/services/collector/event with "Authorization: Splunk <token>" (the token
// from the variable splunk.tokenEnv names), one request per batch, the events
// concatenated. Each event is { time, source, sourcetype, index?, host?, event }: time
// is the receipt's timestamp in epoch seconds with milliseconds, source defaults to
// svc and sourcetype to svc:receipt. The event object holds receipt_id, issuer_kind,
// issuer_keyid, tool, upstream, agent, agent_provenance, principal, status, reason
// (the denial or withholding reason, or the error of an error execution), policy_decision,
// policy_digest, policy_reasons, args_digest, log_leaf_index, log_tree_size,
// authorization_leaf_index, consumed_count, model and session (the session id); a field
// the receipt does not have is null (consumed_count included: null, not 0, on a receipt
// without consumed).
//
// # Tool definition changes
//
// The one record kind besides receipts ([ToolChange], [EventSink]): a gateway's
// upstream changed a tool's definition. It goes through each exporter's in-memory
// queue (with a broker too; SVC_RECEIPTS holds receipts only) as an OTLP span named
// svc.tool_definition.changed or a HEC event of sourcetype svc:tool_definition_change;
// the receipts' wire forms above are unchanged. docs/design/exports.md, "Tool
// definition changes", lists the fields.
//
// # Failures
//
// A transport error, a timeout (ten seconds a request), 408, 429, 5xx, and 401, 403 and
// 404 (configuration an operator can fix while exports wait) are retried with backoff.
// Any other 4xx, or an OTLP partial success that rejected spans, is a refusal for
// good: a refused batch is retried record by record, and a record still refused is
// dropped with its line (standalone) or kept in SVC_DEAD with its line (pipeline).
package exporters
