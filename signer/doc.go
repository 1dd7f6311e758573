// Package signer holds Ed25519 keys as the service stores and names them.
//
// # Key files
//
// A key pair is two files: <name>.key, the private key as PKCS#8 PEM "PRIVATE KEY"
// written with mode 0600, and <name>.pub, the public key as SPKI PEM "PUBLIC KEY".
//
// # Key ids
//
// A keyid is the hex SHA-256 of the SPKI DER encoding of the public key. Signatures
// are matched to trusted keys by keyid, so a verifier holding several keys (rotation)
// needs no hint beyond the envelope.
//
// # Key documents
//
// A [KeyDocument] lists the current key first and retired keys after it, so heads that
// retired keys signed keep verifying. The log server and the witness publish one.
package signer
