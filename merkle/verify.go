package merkle

import "fmt"

// RootFromInclusionProof returns the root of the tree of size leaves in which
// leaf is the leaf hash at index, if proof is an inclusion proof for it,
// following RFC 9162 section 2.1.3.2. The proof lists hashes from the leaf
// upwards, as Tree.InclusionProof returns them.
//
// It returns an error wrapping ErrIndexOutOfRange if index >= size, and
// ErrInvalidProof if the proof has the wrong length for index and size. The
// caller must compare the result with a trusted root (or use
// VerifyInclusion).
func RootFromInclusionProof(index, size uint64, leaf Hash, proof []Hash) (Hash, error) {
	if index >= size {
		return Hash{}, fmt.Errorf("%w: leaf index %d, tree size %d", ErrIndexOutOfRange, index, size)
	}
	fn, sn := index, size-1
	r := leaf
	for i, p := range proof {
		if sn == 0 {
			return Hash{}, fmt.Errorf("%w: inclusion proof has %d hashes, more than the %d for index %d in size %d",
				ErrInvalidProof, len(proof), i, index, size)
		}
		if fn&1 == 1 || fn == sn {
			r = NodeHash(p, r)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = NodeHash(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return Hash{}, fmt.Errorf("%w: inclusion proof has %d hashes, too few for index %d in size %d",
			ErrInvalidProof, len(proof), index, size)
	}
	return r, nil
}

// VerifyInclusion checks that proof proves that leaf is the leaf hash at
// index in the tree of size leaves whose root is root (RFC 9162 section
// 2.1.3.2). It returns nil on success, an error wrapping ErrIndexOutOfRange
// if index >= size, and an error wrapping ErrInvalidProof otherwise.
func VerifyInclusion(index, size uint64, leaf Hash, proof []Hash, root Hash) error {
	r, err := RootFromInclusionProof(index, size, leaf, proof)
	if err != nil {
		return err
	}
	if r != root {
		return fmt.Errorf("%w: inclusion proof for index %d in size %d gives root %s, want %s",
			ErrInvalidProof, index, size, r, root)
	}
	return nil
}

// VerifyConsistency checks that proof proves that the tree of oldSize leaves
// with root oldRoot is a prefix of the tree of newSize leaves with root
// newRoot (RFC 9162 section 2.1.4.2).
//
// Sizes the RFC leaves undefined are handled as Tree.ConsistencyProof makes
// them: if oldSize == newSize the proof must be empty and the roots equal; if
// oldSize == 0 the proof must be empty and oldRoot must be EmptyRoot (the
// empty tree is a prefix of every tree). It returns nil on success, an error
// wrapping ErrSizeOutOfRange if oldSize > newSize, and an error wrapping
// ErrInvalidProof otherwise.
func VerifyConsistency(oldSize, newSize uint64, oldRoot, newRoot Hash, proof []Hash) error {
	switch {
	case oldSize > newSize:
		return fmt.Errorf("%w: consistency proof from size %d to smaller size %d", ErrSizeOutOfRange, oldSize, newSize)
	case oldSize == newSize:
		if len(proof) != 0 {
			return fmt.Errorf("%w: consistency proof between equal sizes %d has %d hashes, want none",
				ErrInvalidProof, oldSize, len(proof))
		}
		if oldRoot != newRoot {
			return fmt.Errorf("%w: different roots %s and %s for the same size %d", ErrInvalidProof, oldRoot, newRoot, oldSize)
		}
		return nil
	case oldSize == 0:
		if len(proof) != 0 {
			return fmt.Errorf("%w: consistency proof from size 0 has %d hashes, want none", ErrInvalidProof, len(proof))
		}
		if oldRoot != EmptyRoot {
			return fmt.Errorf("%w: root %s of size 0 is not the empty root", ErrInvalidProof, oldRoot)
		}
		return nil
	case len(proof) == 0:
		return fmt.Errorf("%w: empty consistency proof from size %d to %d", ErrInvalidProof, oldSize, newSize)
	}

	// Step 2: if oldSize is a power of two, the path starts with oldRoot.
	// Rather than copy the caller's slice, seed holds path[0] and rest the
	// remaining path.
	seed, rest := proof[0], proof[1:]
	if oldSize&(oldSize-1) == 0 {
		seed, rest = oldRoot, proof
	}
	fn, sn := oldSize-1, newSize-1
	for fn&1 == 1 {
		fn >>= 1
		sn >>= 1
	}
	fr, sr := seed, seed
	for i, c := range rest {
		if sn == 0 {
			return fmt.Errorf("%w: consistency proof has %d hashes, more than the %d for sizes %d to %d",
				ErrInvalidProof, len(proof), len(proof)-len(rest)+i, oldSize, newSize)
		}
		if fn&1 == 1 || fn == sn {
			fr = NodeHash(c, fr)
			sr = NodeHash(c, sr)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			sr = NodeHash(sr, c)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return fmt.Errorf("%w: consistency proof has %d hashes, too few for sizes %d to %d",
			ErrInvalidProof, len(proof), oldSize, newSize)
	}
	if fr != oldRoot {
		return fmt.Errorf("%w: consistency proof gives old root %s, want %s", ErrInvalidProof, fr, oldRoot)
	}
	if sr != newRoot {
		return fmt.Errorf("%w: consistency proof gives new root %s, want %s", ErrInvalidProof, sr, newRoot)
	}
	return nil
}
