// Package receipt is the evidence format: canonical JSON, DSSE envelopes, the receipt,
// authorization and tool-definitions statements (tooldefs.go), tree heads, bundles, delegation grants and their chains,
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
// refuses yields no receipt. [Issuer.LogToolDefinitions] logs a gateway's
// tool-definitions statement the same way, as receipts/<statementId>.tools.json.
//
// # References and their fast twins
//
// The encodings on the call path are written and read directly, in one pass, by fast
// twins of a general reference; each twin declines (and the reference runs) whatever
// it is not sure of, and a fuzz target holds it to its reference:
//
//   - RFC 8785: the reference is github.com/gowebpki/jcs; its twin transformJCS
//     (CanonicalizeJSON), held by FuzzCanonicalizeMatchesReference.
//   - Canonical forms: the reference is [Canonical] (encoding/json, then RFC 8785);
//     the twins are the direct writers of the statement (FuzzStatementCanonical), the
//     receipt and authorization predicates (appendCanonicalPredicate,
//     appendCanonicalAuthorization: FuzzPredicateCanonical), an envelope
//     (Envelope.Canonical: FuzzEnvelopeCanonical) and a tree head payload
//     (treeHeadPayload: FuzzTreeHeadPayload).
//   - Bundle files: the reference is json.MarshalIndent; the twin bundleFile
//     (appendIndentedBundle), held by FuzzBundleFile and FuzzIndentedBundleExact.
//   - Reading: the reference is encoding/json; the twins are parseFileForm
//     (FuzzParseFileForm), parseSignedStatement (FuzzParseSignedStatement),
//     decodeCanonicalPredicate and decodeCanonicalAuthorization
//     (FuzzDecodeCanonicalPredicate), [DecodeReceipt] (FuzzDecodeReceipt, against
//     DecodeStatement and DecodePredicate) and Base64's plain path (FuzzBase64Plain).
//
// The gateway's own fast paths and their references are listed in package gateway's
// documentation.
package receipt
