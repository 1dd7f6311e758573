// Package conformance checks evidence with public keys only: the receipt verifier, the
// auditor of two tree heads, and the published conformance vectors that a second
// implementation reproduces.
//
// # Verifying a receipt
//
// [Verify] runs the checks of SPEC.md's verification table, in that order and under
// those names, and returns a [Report]. A bundle passes only if every check passes.
// A gateway receipt runs seventeen checks (eighteen with a log copy), five more for a
// pre-committed call and one more for a chained grant; an SDK receipt runs fewer.
// `tree head names the expected log` always runs: with an expected log id it compares,
// without one it passes and names the log the head states.
//
// # Auditing a log
//
// [Audit] checks that a newer head extends an older one with a consistency proof from
// a log copy or a log server.
package conformance
