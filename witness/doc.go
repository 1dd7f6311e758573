// Package witness is the witness of SPEC.md ("Checkpoint and witness cycle"): a process
// on a machine the log operator does not control that countersigns the log's published
// checkpoints, and refuses, loudly, to countersign a second history.
//
// Each cycle, per watched tenant, the witness
//
//  1. fetches <checkpoints-url>/<tenant>/latest.json (SPEC.md's file form);
//  2. verifies it against the log's published key document,
//     <log-url>/.well-known/svc-log.json for the default tenant and
//     <log-url>/t/<tenant>/.well-known/svc-log.json for the others;
//  3. proves with the log's /consistency route (tenant-prefixed for a tenant) that it
//     extends the last head this witness signed, which it remembers in
//     <out>/<tenant>/state.json;
//  4. saves the new state (atomically, fsynced) and only then countersigns: it adds its
//     own DSSE signature to the log's envelope and writes <out>/<tenant>/<treeSize>.json
//     and <out>/<tenant>/latest.json in the same file form, now with two signatures.
//
// The witness key document is <out>/.well-known/svc-witness.json (SPEC.md's key
// document shape). Serving <out> read-only from any static host is how the witness
// publishes: `svc log-check --witness-url` and `svc audit --witness-url` read it.
//
// The first head the witness sees has nothing to be proved against and is trusted on
// first use. A checkpoint at the size already countersigned, with the same root and a
// newer signedAt (the log's heartbeat) is countersigned again; with the same signedAt
// it is "unchanged". A latest.json older than the countersigned head is accepted as a
// stale copy only if it is a prefix of it.
//
// # Alarms
//
// Three refusals are evidence that the log misbehaved:
//
//   - does-not-extend: the consistency proof from the countersigned head to the
//     checkpoint does not verify (the history was rewritten);
//   - second-history: a checkpoint at the countersigned size with another root (a fork);
//   - unpublished-key: no signature verifies against the published keys, and a
//     signature is by a key the key document does not list. (Signatures by unlisted
//     keys beside a valid log signature, such as other witnesses' cosignatures, are
//     logged and tolerated.)
//
// Each writes <out>/<tenant>/ALARM.json and a uniquely named
// <out>/<tenant>/ALARM-<time>.json, <time> being RFC 3339 basic format with nanoseconds
// (20260102T030405.123456789Z), with -2, -3... appended if two alarms share an instant.
// The body (type Alarm) names the kind, the head the witness had signed, the head it
// refused (both envelopes, signed by the log: together they are the evidence), and the
// consistency proof or key ids involved. The state never moves on an alarm; the witness
// keeps running and re-checks next cycle. A refusal that persists is not written again.
// ALARM.json stays until a person removes it: `svc log-check --witness-url` fails while
// it exists.
//
// Other failures (a log or checkpoint host that does not answer within ten seconds, a
// malformed file, a signature by a published key that does not verify) are errors: the
// tenant is neither countersigned nor alarmed, and the next cycle tries again.
//
// # C2SP tlog-witness
//
// TlogWitness (tlogwitness.go) serves the C2SP tlog-witness protocol beside the cycle
// (svc witness --listen): POST /add-checkpoint, answered with a tlog-cosignature/v1
// line (cosignature.go, which also verifies such lines for policies), so the witness
// cosigns any C2SP log and any C2SP log client can ask it.
package witness
