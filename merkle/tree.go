package merkle

import (
	"fmt"
	"math"
	"math/bits"
	"sync"
)

// A Tree is an append-only RFC 6962 Merkle tree over leaf hashes, kept in a
// HashStore. It appends in O(log n) time and computes any root, inclusion
// proof or consistency proof of any size up to its own in O(log n) store
// reads. It is safe for concurrent use: readers run in parallel and appends
// are serialised.
type Tree struct {
	mu    sync.RWMutex
	store HashStore
	size  uint64
	// frontier holds the roots of the perfect subtrees that make up the
	// tree, one per set bit of size, largest (leftmost) first. Append and
	// Root need no store reads.
	frontier []Hash
	// err is the sticky error of a failed store append, after which the
	// store may be inconsistent and the tree refuses appends.
	err error

	rootMu   sync.Mutex
	rootSize uint64 // size of root; root is valid if rootSize == size
	root     Hash
}

// NewTree returns a tree over store, resuming at the store's size (its
// number of leaf hashes). Upper-level hashes missing from the store are
// recomputed and appended; a store with more upper-level hashes than its
// leaves support is an error wrapping ErrCorruptStore.
func NewTree(store HashStore) (*Tree, error) {
	if err := completeLevels(store); err != nil {
		return nil, err
	}
	t := &Tree{store: store, size: store.Len(0)}
	for n, lo := t.size, uint64(0); n != 0; {
		l := uint8(63 - bits.LeadingZeros64(n))
		h, err := store.Get(l, lo>>l)
		if err != nil {
			return nil, err
		}
		t.frontier = append(t.frontier, h)
		lo += 1 << l
		n &^= 1 << l
	}
	t.root = t.foldFrontier()
	t.rootSize = t.size
	return t, nil
}

// Size returns the number of leaves.
func (t *Tree) Size() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.size
}

// Append appends a leaf hash and returns its index. After a store error the
// tree refuses further appends (the store may be inconsistent); reopen it.
func (t *Tree) Append(leaf Hash) (index uint64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.appendLocked(leaf)
}

// AppendBatch appends leaf hashes in order, as one step for concurrent
// readers, and returns the index of the first. Appending no leaves returns
// Size().
func (t *Tree) AppendBatch(leaves []Hash) (first uint64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	first = t.size
	for _, h := range leaves {
		if _, err := t.appendLocked(h); err != nil {
			return first, err
		}
	}
	return first, nil
}

func (t *Tree) appendLocked(leaf Hash) (uint64, error) {
	if t.err != nil {
		return 0, t.err
	}
	index := t.size
	if index == math.MaxUint64 {
		return 0, fmt.Errorf("%w: tree is full", ErrSizeOutOfRange)
	}
	if err := t.store.Append(0, leaf); err != nil {
		t.err = fmt.Errorf("merkle: tree store failed, reopen the tree: %w", err)
		return 0, t.err
	}
	// Combine upwards while the new node completes a perfect subtree: the
	// left sibling of each such node is the next frontier hash from the
	// right. The frontier changes only once the store has everything, so
	// that a failed append leaves Root and Size as they were.
	h := leaf
	n := len(t.frontier)
	for i, l := index, uint8(0); i&1 == 1; i, l = i>>1, l+1 {
		n--
		h = NodeHash(t.frontier[n], h)
		if err := t.store.Append(l+1, h); err != nil {
			t.err = fmt.Errorf("merkle: tree store failed, reopen the tree: %w", err)
			return 0, t.err
		}
	}
	t.frontier = append(t.frontier[:n], h)
	t.size++
	return index, nil
}

// Next tells what appending leaf would give, without appending: the leaf's index, the
// root of the tree one leaf larger, and the leaf's inclusion proof in that tree (the
// frontier, smallest subtree first). An Append of leaf with nothing appended in
// between yields that index, and then RootAt(index+1) and InclusionProof(index,
// index+1) equal root and proof. A log can so sign the next head while the leaf is
// still being made durable.
func (t *Tree) Next(leaf Hash) (index uint64, root Hash, proof []Hash) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	root = leaf
	proof = make([]Hash, 0, len(t.frontier))
	for i := len(t.frontier) - 1; i >= 0; i-- {
		proof = append(proof, t.frontier[i])
		root = NodeHash(t.frontier[i], root)
	}
	return t.size, root, proof
}

// foldFrontier returns MTH of the whole tree: the frontier hashes folded
// from the right.
func (t *Tree) foldFrontier() Hash {
	if len(t.frontier) == 0 {
		return EmptyRoot
	}
	h := t.frontier[len(t.frontier)-1]
	for i := len(t.frontier) - 2; i >= 0; i-- {
		h = NodeHash(t.frontier[i], h)
	}
	return h
}

// Root returns the root of the current tree (EmptyRoot for an empty tree).
// It is computed from at most 64 in-memory hashes when the tree has changed
// and cached.
func (t *Tree) Root() Hash {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.rootLocked()
}

func (t *Tree) rootLocked() Hash {
	t.rootMu.Lock()
	defer t.rootMu.Unlock()
	if t.rootSize != t.size {
		t.root = t.foldFrontier()
		t.rootSize = t.size
	}
	return t.root
}

// RootAt returns the root of the tree's first size leaves, for any size in
// [0, Size()]; a larger size is an error wrapping ErrSizeOutOfRange.
func (t *Tree) RootAt(size uint64) (Hash, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if size > t.size {
		return Hash{}, fmt.Errorf("%w: root of size %d, tree size %d", ErrSizeOutOfRange, size, t.size)
	}
	if size == t.size {
		return t.rootLocked(), nil
	}
	if size == 0 {
		return EmptyRoot, nil
	}
	return t.rangeHash(0, size)
}

// LeafHash returns the leaf hash at index, which must be below Size() (else
// an error wrapping ErrIndexOutOfRange).
func (t *Tree) LeafHash(index uint64) (Hash, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if index >= t.size {
		return Hash{}, fmt.Errorf("%w: leaf %d, tree size %d", ErrIndexOutOfRange, index, t.size)
	}
	return t.store.Get(0, index)
}

// rangeHash returns MTH(D[lo:lo+n]) for n > 0 and lo a multiple of the
// largest power of two not above n, which holds for every range in the RFC's
// recursion. Such a range is the concatenation of perfect aligned subtrees,
// one per set bit of n in decreasing size; their hashes are read from the
// store and folded from the right, exactly as MTH splits them.
func (t *Tree) rangeHash(lo, n uint64) (Hash, error) {
	var h Hash
	end := lo + n
	for first := true; n != 0; first = false {
		l := uint8(bits.TrailingZeros64(n))
		end -= 1 << l
		g, err := t.store.Get(l, end>>l)
		if err != nil {
			return Hash{}, err
		}
		if first {
			h = g
		} else {
			h = NodeHash(g, h)
		}
		n &^= 1 << l
	}
	return h, nil
}

// split returns k, the largest power of two smaller than n, for n >= 2.
func split(n uint64) uint64 {
	return 1 << (bits.Len64(n-1) - 1)
}

// InclusionProof returns the inclusion proof of the leaf at index in the
// tree of the first size leaves: RFC 9162 PATH(index, D[size]), listed from
// the leaf upwards. It needs index < size <= Size(); otherwise it returns an
// error wrapping ErrSizeOutOfRange or ErrIndexOutOfRange. The proof of the
// only leaf of a tree of size 1 is empty.
func (t *Tree) InclusionProof(index, size uint64) ([]Hash, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if size > t.size {
		return nil, fmt.Errorf("%w: inclusion proof in size %d, tree size %d", ErrSizeOutOfRange, size, t.size)
	}
	if index >= size {
		return nil, fmt.Errorf("%w: inclusion proof of leaf %d in size %d", ErrIndexOutOfRange, index, size)
	}
	// Walk down from the root, collecting the sibling of each subtree that
	// contains index; the RFC lists them bottom up.
	path := make([]Hash, 0, bits.Len64(size))
	lo, n, m := uint64(0), size, index
	for n > 1 {
		k := split(n)
		var h Hash
		var err error
		if m < k {
			h, err = t.rangeHash(lo+k, n-k)
			n = k
		} else {
			h, err = t.rangeHash(lo, k)
			lo, m, n = lo+k, m-k, n-k
		}
		if err != nil {
			return nil, err
		}
		path = append(path, h)
	}
	reverse(path)
	return path, nil
}

// ConsistencyProof returns the proof that the tree of the first oldSize
// leaves is a prefix of the tree of the first newSize leaves: RFC 9162
// PROOF(oldSize, D[newSize]), listed from the bottom upwards. It needs
// oldSize <= newSize <= Size(), else it returns an error wrapping
// ErrSizeOutOfRange.
//
// The proof is empty if oldSize == newSize, as in the RFC, and also if
// oldSize == 0, for which the RFC defines no proof: the empty tree is a
// prefix of every tree, and VerifyConsistency accepts an empty proof from
// size 0 whose old root is EmptyRoot.
func (t *Tree) ConsistencyProof(oldSize, newSize uint64) ([]Hash, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if newSize > t.size {
		return nil, fmt.Errorf("%w: consistency proof to size %d, tree size %d", ErrSizeOutOfRange, newSize, t.size)
	}
	if oldSize > newSize {
		return nil, fmt.Errorf("%w: consistency proof from size %d to smaller size %d", ErrSizeOutOfRange, oldSize, newSize)
	}
	proof := []Hash{}
	if oldSize == 0 || oldSize == newSize {
		return proof, nil
	}
	// SUBPROOF(m, D[lo:lo+n], b), unrolled: walk down until the old tree's
	// right edge is the right edge of a subtree, collecting siblings.
	lo, n, m, whole := uint64(0), newSize, oldSize, true
	for m != n {
		k := split(n)
		var h Hash
		var err error
		if m <= k {
			h, err = t.rangeHash(lo+k, n-k)
			n = k
		} else {
			h, err = t.rangeHash(lo, k)
			lo, m, n, whole = lo+k, m-k, n-k, false
		}
		if err != nil {
			return nil, err
		}
		proof = append(proof, h)
	}
	if !whole {
		// SUBPROOF(m, D[m], false) = {MTH(D[m])}: the verifier does not
		// know this subtree's hash (it is not the whole old tree).
		h, err := t.rangeHash(lo, m)
		if err != nil {
			return nil, err
		}
		proof = append(proof, h)
	}
	reverse(proof)
	return proof, nil
}

func reverse(s []Hash) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}
