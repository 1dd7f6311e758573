// Package receipt is the evidence format: canonical JSON, DSSE envelopes, the receipt
// and authorization statements, tree heads, bundles, delegation grants and their chains,
// upstream attestations and provider deliveries, and the issuer core that gateways and
// the SDK share.
//
// # Canonical JSON
//
// Every digest and every signed payload is RFC 8785 (JCS) canonical JSON: keys sorted,
// no whitespace. Optional fields that are absent are omitted; fields SPEC.md says are
// null are written as null. [Canonical] marshals a Go value that way; [Digest] is the hex
// SHA-256 of it.
//
// # Envelopes
//
// An [Envelope] is DSSE: payloadType, base64 payload and one or more Ed25519 signatures
// over the pre-authentication encoding [PAE]. Signatures are matched to trusted keys by
// keyid (hex SHA-256 of the SPKI DER); several signatures may be present (a witness adds
// its own to a checkpoint).
//
// # Statements
//
// A receipt is an in-toto Statement v1 ([StatementType]) whose predicateType is
// [PredicateReceipt] and whose predicate is a [Predicate]. Every descriptive field
// carries a [Provenance] label: attested, observed or claimed.
//
// # The issuer core
//
// An [Issuer] turns a call record into a signed receipt: it signs the statement, for a
// pre-committed call first signs and logs the authorization statement, appends the
// receipt's leaf to a [Log], and writes receipts/<id>.json atomically. A leaf the log
// refuses yields no receipt.
package receipt
