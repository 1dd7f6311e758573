// Package merkle implements the append-only Merkle tree of the service's
// transparency log: RFC 6962 hashing, the RFC 9162 inclusion and consistency
// proofs and their verification, stores for the tree's node hashes, and the
// log file that local-mode gateways and sidecars keep (SPEC.md, "Log file").
//
// # Hashing
//
// A leaf hash is SHA-256(0x00 || leaf) and an interior node hash is
// SHA-256(0x01 || left || right), as in RFC 6962 section 2.1. The root of the
// empty tree is SHA-256 of the empty string ([EmptyRoot]). The root of n > 1
// leaves splits them at k, the largest power of two smaller than n:
// MTH(D[n]) = NodeHash(MTH(D[0:k]), MTH(D[k:n])). Leaves of the service's log
// are the canonical JSON of receipt envelopes, but nothing in this package
// depends on that.
//
// # Proofs
//
// [Tree.InclusionProof] computes RFC 9162 PATH(m, D[n]) and
// [Tree.ConsistencyProof] computes PROOF(m, D[n]); both list hashes from the
// bottom of the tree upwards, exactly as RFC 6962, RFC 9162,
// golang.org/x/mod/sumdb/tlog and github.com/transparency-dev/merkle do, so
// proofs are interchangeable with those implementations (the tests check
// this). [VerifyInclusion] and [VerifyConsistency] are the RFC 9162 section
// 2.1.3.2 and 2.1.4.2 algorithms; they are pure functions and need no tree.
//
// # Storage
//
// A [Tree] keeps its node hashes in a [HashStore], which holds only the
// hashes of complete (perfect, aligned) subtrees: level 0 holds the leaf
// hashes, and hash i of level l is the root of leaves [i<<l, (i+1)<<l). A
// tree of n leaves stores about 2n hashes (64 bytes a leaf). The hash of any
// other range, such as the root of a tree whose size is not a power of two,
// is folded from at most 64 stored hashes, so proofs never need the leaves.
// [NewMemoryStore] keeps the hashes in memory; [OpenFileStore] keeps one
// append-only file a level and reads it with ReadAt, so its memory stays flat
// as the log grows.
//
// # Log file
//
// A [LogFile] is SPEC.md's log file: one JSON value a line, of three kinds
// (see [LineKind]):
//
//	"<leaf>"                  a leaf, as a JSON string; its leaf hash is LeafHash([]byte(leaf))
//	{"hash":"<64 hex>"}       a leaf appended by its leaf hash (hash-only mode)
//	{"pruned":"<64 hex>"}     a leaf whose content was removed by retention; the hex is its leaf hash
//
// Only leaf hashes enter the tree, so [PruneLogFile] changes no root and no
// proof. [OpenLogFile] rebuilds the tree from the file. A line is at most
// [MaxLineSize] bytes, not counting its newline.
//
// # Durability and crash recovery
//
// The log file is the durability point: an append returns only after its
// line reached the file and the file was fsynced, and only then is the tree
// updated. A crash can therefore leave at most a torn last line, which was
// never acknowledged; [OpenLogFile] truncates it away and logs a warning.
// Any other malformed line is an error that names the line: the package never
// drops data silently. A persistent [HashStore] is a cache of values that can
// be recomputed from the leaf hashes; [OpenFileStore] repairs torn records
// and recomputes missing upper levels, and [OpenLogFile] rebuilds whatever
// part of the store is missing from the file.
//
// # Concurrency
//
// A [Tree] and a [LogFile] are safe for concurrent use by many goroutines:
// reads (roots, proofs, entries) run in parallel, appends are serialised
// behind a sync.RWMutex. Files are locked (advisory flock on Unix) so that a
// second process, or [PruneLogFile], cannot write under an open log or store.
package merkle
