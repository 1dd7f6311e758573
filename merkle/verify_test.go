package merkle

import (
	"errors"
	"testing"
)

// provingTree is a tree with all its roots and leaves at hand.
type provingTree struct {
	tree   *Tree
	leaves []Hash
	roots  []Hash // roots[n] is the root of size n
}

func newProvingTree(t *testing.T, n int) *provingTree {
	leaves := randomLeaves(uint64(n)+100, n)
	pt := &provingTree{tree: buildTree(t, NewMemoryStore(), leaves), leaves: leaves}
	for s := range uint64(n + 1) {
		r, err := pt.tree.RootAt(s)
		if err != nil {
			t.Fatal(err)
		}
		pt.roots = append(pt.roots, r)
	}
	return pt
}

func flipBit(p []Hash, i int, bit uint) []Hash {
	q := append([]Hash(nil), p...)
	q[i][bit/8] ^= 1 << (bit % 8)
	return q
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrInvalidProof) {
		t.Errorf("%s: err = %v, want ErrInvalidProof", what, err)
	}
}

func TestVerifyInclusionRejects(t *testing.T) {
	const n = 40
	pt := newProvingTree(t, n)
	bit := uint(0)
	for size := uint64(1); size <= n; size++ {
		root := pt.roots[size]
		for index := range size {
			leaf := pt.leaves[index]
			p, err := pt.tree.InclusionProof(index, size)
			if err != nil {
				t.Fatal(err)
			}
			if err := VerifyInclusion(index, size, leaf, p, root); err != nil {
				t.Fatalf("valid proof (%d, %d) rejected: %v", index, size, err)
			}
			if r, err := RootFromInclusionProof(index, size, leaf, p); err != nil || r != root {
				t.Fatalf("RootFromInclusionProof(%d, %d) = %s, %v", index, size, r, err)
			}
			// A flipped bit in any proof hash, in the leaf, in the root.
			for i := range p {
				bit = (bit + 37) % 256
				wantInvalid(t, "flipped proof bit", VerifyInclusion(index, size, leaf, flipBit(p, i, bit), root))
			}
			wantInvalid(t, "flipped leaf bit", VerifyInclusion(index, size, flipBit([]Hash{leaf}, 0, bit)[0], p, root))
			wantInvalid(t, "flipped root bit", VerifyInclusion(index, size, leaf, p, flipBit([]Hash{root}, 0, bit)[0]))
			// Truncated and extended proofs.
			if len(p) > 0 {
				wantInvalid(t, "proof without its last hash", VerifyInclusion(index, size, leaf, p[:len(p)-1], root))
				wantInvalid(t, "proof without its first hash", VerifyInclusion(index, size, leaf, p[1:], root))
			}
			wantInvalid(t, "proof with an extra hash", VerifyInclusion(index, size, leaf, append(p[:len(p):len(p)], root), root))
			wantInvalid(t, "proof with a zero hash", VerifyInclusion(index, size, leaf, append(p[:len(p):len(p)], Hash{}), root))
			// Another leaf's hash at this index, and this leaf at another index.
			wantInvalid(t, "wrong leaf", VerifyInclusion(index, size, pt.leaves[(index+1)%n], p, root))
			for other := range size {
				if other != index {
					wantInvalid(t, "wrong index", VerifyInclusion(other, size, leaf, p, root))
				}
			}
			// The proof with a wrong size, against that size's real root: it
			// may only pass if the two sizes have the very same proof.
			for other := index + 1; other <= n; other++ {
				if other == size {
					continue
				}
				q, _ := pt.tree.InclusionProof(index, other)
				err := VerifyInclusion(index, other, leaf, p, pt.roots[other])
				if equalProofs(p, q) {
					if err != nil {
						t.Errorf("(%d, %d) has the proof of size %d, but it is rejected: %v", index, size, other, err)
					}
				} else {
					wantInvalid(t, "wrong size", err)
				}
			}
			// Index beyond the size.
			if err := VerifyInclusion(size, size, leaf, p, root); !errors.Is(err, ErrIndexOutOfRange) {
				t.Errorf("index == size: err = %v, want ErrIndexOutOfRange", err)
			}
		}
	}
	if err := VerifyInclusion(0, 0, Hash{}, nil, EmptyRoot); !errors.Is(err, ErrIndexOutOfRange) {
		t.Errorf("size 0: err = %v, want ErrIndexOutOfRange", err)
	}
}

func TestVerifyConsistencyRejects(t *testing.T) {
	const n = 40
	pt := newProvingTree(t, n)
	bit := uint(0)
	for newSize := uint64(1); newSize <= n; newSize++ {
		for oldSize := uint64(1); oldSize < newSize; oldSize++ {
			oldRoot, newRoot := pt.roots[oldSize], pt.roots[newSize]
			p, err := pt.tree.ConsistencyProof(oldSize, newSize)
			if err != nil {
				t.Fatal(err)
			}
			if err := VerifyConsistency(oldSize, newSize, oldRoot, newRoot, p); err != nil {
				t.Fatalf("valid proof (%d, %d) rejected: %v", oldSize, newSize, err)
			}
			for i := range p {
				bit = (bit + 37) % 256
				wantInvalid(t, "flipped proof bit", VerifyConsistency(oldSize, newSize, oldRoot, newRoot, flipBit(p, i, bit)))
			}
			wantInvalid(t, "flipped old root", VerifyConsistency(oldSize, newSize, flipBit([]Hash{oldRoot}, 0, bit)[0], newRoot, p))
			wantInvalid(t, "flipped new root", VerifyConsistency(oldSize, newSize, oldRoot, flipBit([]Hash{newRoot}, 0, bit)[0], p))
			wantInvalid(t, "swapped roots", VerifyConsistency(oldSize, newSize, newRoot, oldRoot, p))
			wantInvalid(t, "empty proof", VerifyConsistency(oldSize, newSize, oldRoot, newRoot, nil))
			wantInvalid(t, "proof without its last hash", VerifyConsistency(oldSize, newSize, oldRoot, newRoot, p[:len(p)-1]))
			wantInvalid(t, "proof without its first hash", VerifyConsistency(oldSize, newSize, oldRoot, newRoot, p[1:]))
			wantInvalid(t, "proof with an extra hash", VerifyConsistency(oldSize, newSize, oldRoot, newRoot, append(p[:len(p):len(p)], newRoot)))
			wantInvalid(t, "proof with the old root prepended", VerifyConsistency(oldSize, newSize, oldRoot, newRoot, append([]Hash{oldRoot}, p...)))
			// Wrong sizes, each with its real root: only equal proofs may pass.
			for other := uint64(1); other <= n; other++ {
				if other != oldSize && other < newSize {
					q, _ := pt.tree.ConsistencyProof(other, newSize)
					err := VerifyConsistency(other, newSize, pt.roots[other], newRoot, p)
					if !equalProofs(p, q) {
						wantInvalid(t, "wrong old size", err)
					} else if err != nil {
						t.Errorf("equal proofs, one rejected: %v", err)
					}
				}
				if other != newSize && other > oldSize {
					q, _ := pt.tree.ConsistencyProof(oldSize, other)
					err := VerifyConsistency(oldSize, other, oldRoot, pt.roots[other], p)
					if !equalProofs(p, q) {
						wantInvalid(t, "wrong new size", err)
					} else if err != nil {
						t.Errorf("equal proofs, one rejected: %v", err)
					}
				}
			}
			if err := VerifyConsistency(newSize, oldSize, newRoot, oldRoot, p); !errors.Is(err, ErrSizeOutOfRange) {
				t.Errorf("old > new: err = %v, want ErrSizeOutOfRange", err)
			}
		}
	}
}

func TestVerifyConsistencyEdges(t *testing.T) {
	pt := newProvingTree(t, 5)
	r0, r3, r5 := pt.roots[0], pt.roots[3], pt.roots[5]
	if err := VerifyConsistency(0, 5, EmptyRoot, r5, nil); err != nil {
		t.Errorf("from size 0 with empty proof: %v", err)
	}
	if r0 != EmptyRoot {
		t.Fatal("root of size 0 is not EmptyRoot")
	}
	if err := VerifyConsistency(0, 0, EmptyRoot, EmptyRoot, nil); err != nil {
		t.Errorf("0 to 0: %v", err)
	}
	wantInvalid(t, "from size 0 with a non-empty old root", VerifyConsistency(0, 5, r3, r5, nil))
	wantInvalid(t, "from size 0 with a proof", VerifyConsistency(0, 5, EmptyRoot, r5, []Hash{r3}))
	if err := VerifyConsistency(3, 3, r3, r3, nil); err != nil {
		t.Errorf("equal sizes and roots: %v", err)
	}
	wantInvalid(t, "equal sizes, different roots", VerifyConsistency(3, 3, r3, r5, nil))
	wantInvalid(t, "equal sizes, non-empty proof", VerifyConsistency(3, 3, r3, r3, []Hash{r3}))
	if err := VerifyConsistency(5, 3, r5, r3, nil); !errors.Is(err, ErrSizeOutOfRange) {
		t.Errorf("old > new: %v", err)
	}
}
