// Package pipeline is the event-sourced spine of the log service on NATS JetStream:
// the streams and subjects, the wire formats on the broker, and the append client
// producers (gateways, sidecars, the HTTP front) use. It links nats.go only; the
// in-process nats-server of the embedded default is package internal/natsembed, and
// the HTTP client of the log is package client.
//
// # Streams and subjects
//
//	SVC_APPEND  svc.append.<tenant>   work queue, memory storage: append requests
//	SVC_LEAVES  svc.leaves.<tenant>   limits, file storage: committed batches, the log of record
//	SVC_ADMIN   svc.admin.<tenant>    limits, file storage: administrative events (audit trail)
//
// A producer publishes an append request on svc.append.<tenant> naming its reply inbox
// in the Svc-Reply header and waits there. The tenant's sequencer (package sequencer) is
// the only writer of svc.leaves.<tenant>: it commits each batch of leaves with
// Nats-Expected-Last-Subject-Sequence, so a second, stale sequencer is fenced out by the
// broker, and with a Nats-Msg-Id of tenant and first index, so its own retry of a
// commit is idempotent. Everything downstream of SVC_LEAVES is a projection.
//
// # Durability
//
// A batch is answered only after SVC_LEAVES acknowledged its commit. In the embedded
// default the server runs with sync_always, so the acknowledgement follows an fsync of
// the batch; in a cluster, streams with three replicas acknowledge after a quorum
// stored it. SVC_APPEND needs no durability: a producer retries an unanswered request,
// and the sequencer answers a leaf already in the log with its existing index.
package pipeline
