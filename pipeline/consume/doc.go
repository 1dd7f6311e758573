// Package consume is the consumer kit of every Watermill router over JetStream in svc:
// the exporters of SVC_RECEIPTS (package exporters) and the database projections of
// SVC_LEAVES and SVC_ADMIN (package internal/store) build their routers on it.
//
// It owns:
//
//   - SVC_DEAD, the dead-letter stream ([DeadStream], [DeadStreamConfig],
//     [EnsureDeadStream]): one message a letter on svc.dead.<handler>.<tenant>, the
//     message as it was with the handler, the error, the attempts and the source
//     sequence in headers; [Keep] stores a letter, [ListDead] reads them,
//     [DeadCounts] counts them by subject and [ReplayDead] hands them back to the
//     [DeadHandler] of their handler name, removing each once it was taken;
//   - the middleware, outermost first ([Chain]): throttle, measure, dead letters,
//     retry with backoff ([Retry]) and a per-attempt timeout;
//   - the counts a router keeps by handler name ([Stats]), and [NewRouter].
//
// What differs between the routers stays with them: what a message is (a receipt, a
// group of stream messages), which failure is permanent, and what a dead letter does
// to the rest (an exporter acknowledges the message; a projection applies its group
// again without it).
package consume
