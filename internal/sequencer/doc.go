// Package sequencer is the single writer of a tenant's log.
//
// A Sequencer consumes the tenant's append requests from SVC_APPEND, batches them
// (a batch closes when no more requests are waiting, or at MaxBatch leaves, or at the
// byte cap), assigns consecutive indices, commits the batch to svc.leaves.<tenant>
// with Nats-Expected-Last-Subject-Sequence (so a second, stale sequencer is fenced out
// by the broker: its commit is refused and it stops with ErrFenced) and a Nats-Msg-Id of
// tenant and first index (so its own retry of a commit is idempotent), then adds the
// leaves to its tree, signs ONE tree head for the batch and answers every request with
// its own inclusion proof against that head. Only then are the requests acked.
//
// # Durability
//
// A request is answered only after SVC_LEAVES acknowledged the batch that holds it:
// the leaf then survives kill -9 of any process, and in the embedded default (fsync per
// write) a machine crash. The tree store under Dir is a cache of the stream: on start
// the sequencer reads the last committed batch and replays the stream tail the store
// lacks, so restart time depends on what was missed, not on the size of the log.
//
// # Idempotency
//
// A leaf whose hash is already in the log is answered with its existing index and a
// fresh proof, never a second index. The sequencer remembers the hashes of the last
// RecentLeaves leaves (about 40 bytes each, allocated as the log grows, so a small
// log costs kilobytes and memory stays bounded as the log grows), which covers every
// retry a producer makes (three retries within its timeout).
package sequencer
