// Package remote is the signer service (SPEC.md "Signer process") and its client.
//
// In database mode the log server never holds the log's private key: a separate
// `svc signer` process does, and the log server asks it over HTTP to sign each tree
// head. [Server] is that process's handler; [Client] is the log server's side, an
// implementation of receipt.EnvelopeSigner.
//
// # Routes
//
//	POST /sign    Authorization: Bearer <token>; body { payloadType, payload (base64) }
//	              → 200 the signed DSSE Envelope
//	GET  /keys    open → the key document { log?, keys: [current, retired...] }
//	GET  /health  open → { ok: true, keyid }
//
// Every error body is { "error": "<text>" }. A missing or wrong token gets 401
// { "error": "unauthorized" }; a body over [MaxSignBody] gets 413; a body that is not
// JSON (Content-Type application/json required, else 415) or not a tree head gets 400
// naming what was wrong; another path 404; another method 405 with an Allow header.
//
// # Only tree heads
//
// The signer signs nothing but tree heads and C2SP checkpoints (note.go: payloadType
// PayloadCheckpointNote, the three-line checkpoint text, answered with the signed
// Envelope whose payload is the checkpoint's signed note, append-only per origin). For a tree head payloadType must be
// application/vnd.svc.treehead+json and the payload must be the canonical JSON of a
// valid tree head (receipt.DecodeTreeHead, lowercase hex rootHash, re-encoding to the
// same bytes). This is defence in depth: a stolen token cannot make the log key sign a
// receipt, an authorization or a grant. It can still sign a tree head of the thief's
// choosing, so the token must be kept as secret as a key, and the signer should be
// reached over loopback or through TLS (the server speaks plain HTTP and warns when it
// listens on a non-loopback address).
//
// # The token
//
// The server keeps only the SHA-256 of the shared token and compares hashes in
// constant time (crypto/subtle). The token is never logged. It must be at least
// [MinTokenLength] characters of visible ASCII.
//
// # Key document
//
// The current key comes first with validFrom from [ServerConfig.ValidFrom] and no
// validTo. Retired keys follow in the order given. A retired key supplied as a bare
// .pub file carries no dates, so [LoadRetiredKey] takes validFrom from the file's
// modification time and validTo from the current key's validFrom (validFrom is moved
// to one millisecond before validTo if the file is not older than that, so the entry
// stays well formed: key documents need validFrom strictly before validTo). Both
// dates are therefore approximations; verifiers match keys by keyid, not by date.
//
// # The client
//
// [NewClient] fetches GET /keys once and learns the signer's current key (optionally
// pinned with [WithKeyID]). [Client.SignEnvelope] posts to /sign and never trusts the
// answer blindly: the envelope must carry exactly one signature, by the learned key,
// that verifies over exactly the payload type and bytes sent. Transport failures,
// timeouts (default 10 s, [WithTimeout]) and 5xx answers wrap receipt.ErrLogUnavailable;
// a 401 wraps [ErrTokenRefused]; an answer that does not verify wraps [ErrBadResponse].
package remote
