// Package projections holds everything downstream of SVC_LEAVES, the log of record:
// the SPEC log file a file-mode log keeps, metering, and checkpoints. Each projection
// follows the stream with its own position, applies batches idempotently by (tenant,
// index), and can be rebuilt from the stream (svc replay).
package projections
