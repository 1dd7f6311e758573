// Package logserver is the HTTP front of the log service: SPEC.md's public routes,
// append, and the tenant routes, for the default tenant at the root and for other
// tenants under /t/<tenant>/.
//
// Appends go to the tenant's sequencer over NATS (package pipeline) and are answered
// with the sequencer's proof and signed head. Read routes answer from the tenant's
// tree (package merkle), which the sequencer of the same process keeps; heads on /head
// are signed on request.
//
// It serves what it is given (package logservice wires it to the tenants' sequencers
// and projections); it starts nothing itself.
//
// # Errors
//
// Every error has a JSON body {"error": "..."}: 400 for a bad query or body, 401
// {"error":"unauthorized"} for a missing token or one that is not this tenant's, 413
// for an append body over 64 KB, 429 for the per-token rate limit (Retry-After: 1) or
// a used allowance, 503 {"error":"log unavailable: ..."} when the store or the signer
// does not answer.
package logserver
