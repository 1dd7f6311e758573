// Package client is the public wire format of the log service as an outside party
// reads and writes it, with no dependency on the server: SPEC.md's public routes
// ([LogServer]: /head, /root, /consistency, the key document), the checkpoint file and
// API forms ([CheckpointFile], [ParseCheckpoint]), tenant ids and URLs ([ValidTenant],
// [TenantBase], [KeyDocumentURL]), appends over HTTP with SPEC.md's retry contract
// ([HTTPLog]), and the one outbound fetch with its timeout and size cap ([Fetch]).
//
// The verifier, the witness, the probe (monitor), the tenant export, the gateway and
// the SDK use it; none of them links nats-server (a test in this package checks that
// with go list -deps). The server side lives under internal/.
package client
