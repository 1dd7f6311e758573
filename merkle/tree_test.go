package merkle

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"
	"golang.org/x/mod/sumdb/tlog"
)

func hx(s string) Hash {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != HashSize {
		panic(fmt.Sprintf("bad hash %q", s))
	}
	return Hash(b)
}

// rfcLeaves are the leaves of the RFC 6962 test tree of
// certificate-transparency (merkle_tree_test.cc).
var rfcLeaves = []string{
	"", "\x00", "\x10", "\x20\x21", "\x30\x31", "\x40\x41\x42\x43",
	"\x50\x51\x52\x53\x54\x55\x56\x57",
	"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
}

// rfcRoots[n] is the root of the first n rfcLeaves.
var rfcRoots = []Hash{
	hx("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
	hx("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
	hx("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"),
	hx("aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77"),
	hx("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
	hx("4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4"),
	hx("76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef"),
	hx("ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c"),
	hx("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"),
}

// Known inclusion and consistency proofs over rfcLeaves, from the same test
// suite (0-based indices here).
var rfcInclusion = []struct {
	index, size uint64
	proof       []Hash
}{
	{0, 1, nil},
	{0, 8, []Hash{
		hx("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
		hx("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
		hx("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
	}},
	{5, 8, []Hash{
		hx("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
		hx("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
		hx("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
	}},
	{2, 3, []Hash{
		hx("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"),
	}},
	{1, 5, []Hash{
		hx("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
		hx("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
		hx("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
	}},
}

var rfcConsistency = []struct {
	old, new uint64
	proof    []Hash
}{
	{1, 1, nil},
	{1, 8, []Hash{
		hx("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
		hx("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
		hx("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
	}},
	{6, 8, []Hash{
		hx("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
		hx("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
		hx("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
	}},
	{2, 5, []Hash{
		hx("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
		hx("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
	}},
	{6, 7, []Hash{
		hx("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
		hx("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
		hx("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
	}},
}

func TestRFC6962KnownAnswers(t *testing.T) {
	for _, sk := range storeKinds {
		t.Run(sk.name, func(t *testing.T) {
			tr, err := NewTree(sk.open(t))
			if err != nil {
				t.Fatal(err)
			}
			if tr.Root() != rfcRoots[0] {
				t.Fatalf("empty root = %s", tr.Root())
			}
			for i, leaf := range rfcLeaves {
				if _, err := tr.Append(LeafHash([]byte(leaf))); err != nil {
					t.Fatal(err)
				}
				if got := tr.Root(); got != rfcRoots[i+1] {
					t.Errorf("Root after %d leaves = %s, want %s", i+1, got, rfcRoots[i+1])
				}
			}
			// Also against the published table of the testonly package.
			for n, want := range testonly.RootHashes() {
				got, err := tr.RootAt(uint64(n))
				if err != nil || !bytes.Equal(got[:], want) || got != rfcRoots[n] {
					t.Errorf("RootAt(%d) = %s, %v; want %x", n, got, err, want)
				}
			}
			for _, c := range rfcInclusion {
				got, err := tr.InclusionProof(c.index, c.size)
				if err != nil || !equalProofs(got, c.proof) {
					t.Errorf("InclusionProof(%d, %d) = %v, %v; want %v", c.index, c.size, got, err, c.proof)
				}
				leaf := LeafHash([]byte(rfcLeaves[c.index]))
				if err := VerifyInclusion(c.index, c.size, leaf, c.proof, rfcRoots[c.size]); err != nil {
					t.Errorf("VerifyInclusion(%d, %d) of the known proof: %v", c.index, c.size, err)
				}
			}
			for _, c := range rfcConsistency {
				got, err := tr.ConsistencyProof(c.old, c.new)
				if err != nil || !equalProofs(got, c.proof) {
					t.Errorf("ConsistencyProof(%d, %d) = %v, %v; want %v", c.old, c.new, got, err, c.proof)
				}
				if err := VerifyConsistency(c.old, c.new, rfcRoots[c.old], rfcRoots[c.new], c.proof); err != nil {
					t.Errorf("VerifyConsistency(%d, %d) of the known proof: %v", c.old, c.new, err)
				}
			}
		})
	}
}

// crossChecker compares a Tree with three independent implementations built
// from the same leaves: golang.org/x/mod/sumdb/tlog, the reference tree of
// transparency-dev/merkle/testonly, and transparency-dev's compact ranges.
type crossChecker struct {
	t      *testing.T
	tree   *Tree
	leaves []Hash
	tl     *tlogStore
	ref    *testonly.Tree
	roots  [][]byte // roots[n] from compact ranges
}

func newCrossChecker(t *testing.T, tree *Tree, leaves []Hash) *crossChecker {
	c := &crossChecker{t: t, tree: tree, leaves: leaves, tl: newTlogStore(t, leaves),
		ref: testonly.New(rfc6962.DefaultHasher)}
	fact := &compact.RangeFactory{Hash: rfc6962.DefaultHasher.HashChildren}
	cr := fact.NewEmptyRange(0)
	c.roots = [][]byte{rfc6962.DefaultHasher.EmptyRoot()}
	for _, h := range leaves {
		c.ref.Append(bytes.Clone(h[:]))
		if err := cr.Append(bytes.Clone(h[:]), nil); err != nil {
			t.Fatal(err)
		}
		root, err := cr.GetRootHash(nil)
		if err != nil {
			t.Fatal(err)
		}
		c.roots = append(c.roots, root)
	}
	return c
}

func (c *crossChecker) root(n uint64) {
	t := c.t
	got, err := c.tree.RootAt(n)
	if err != nil {
		t.Fatalf("RootAt(%d): %v", n, err)
	}
	want, err := tlog.TreeHash(int64(n), c.tl)
	if err != nil {
		t.Fatal(err)
	}
	if got != Hash(want) {
		t.Errorf("RootAt(%d) = %s, tlog.TreeHash = %s", n, got, want)
	}
	if !bytes.Equal(got[:], c.roots[n]) {
		t.Errorf("RootAt(%d) = %s, compact range root = %x", n, got, c.roots[n])
	}
	if ref := c.ref.HashAt(n); !bytes.Equal(got[:], ref) {
		t.Errorf("RootAt(%d) = %s, testonly.Tree.HashAt = %x", n, got, ref)
	}
}

func (c *crossChecker) inclusion(index, size uint64) {
	t := c.t
	p, err := c.tree.InclusionProof(index, size)
	if err != nil {
		t.Fatalf("InclusionProof(%d, %d): %v", index, size, err)
	}
	root := Hash(c.roots[size])
	leaf := c.leaves[index]
	if err := VerifyInclusion(index, size, leaf, p, root); err != nil {
		t.Errorf("VerifyInclusion(%d, %d): %v", index, size, err)
	}
	tp, err := tlog.ProveRecord(int64(size), int64(index), c.tl)
	if err != nil {
		t.Fatal(err)
	}
	if !equalProofs(p, fromTlog(tp)) {
		t.Errorf("InclusionProof(%d, %d) = %v, tlog.ProveRecord = %v", index, size, p, tp)
	}
	if err := tlog.CheckRecord(tlog.RecordProof(toTlog(p)), int64(size), tlog.Hash(root), int64(index), tlog.Hash(leaf)); err != nil {
		t.Errorf("tlog.CheckRecord rejects InclusionProof(%d, %d): %v", index, size, err)
	}
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, index, size, leaf[:], toBytes(p), root[:]); err != nil {
		t.Errorf("proof.VerifyInclusion rejects InclusionProof(%d, %d): %v", index, size, err)
	}
	rp, err := c.ref.InclusionProof(index, size)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.Join(rp, nil), bytes.Join(toBytes(p), nil)) {
		t.Errorf("InclusionProof(%d, %d) differs from testonly.Tree's", index, size)
	}
}

func (c *crossChecker) consistency(old, new uint64) {
	t := c.t
	p, err := c.tree.ConsistencyProof(old, new)
	if err != nil {
		t.Fatalf("ConsistencyProof(%d, %d): %v", old, new, err)
	}
	oldRoot, newRoot := Hash(c.roots[old]), Hash(c.roots[new])
	if err := VerifyConsistency(old, new, oldRoot, newRoot, p); err != nil {
		t.Errorf("VerifyConsistency(%d, %d): %v", old, new, err)
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, old, new, toBytes(p), oldRoot[:], newRoot[:]); err != nil {
		t.Errorf("proof.VerifyConsistency rejects ConsistencyProof(%d, %d): %v", old, new, err)
	}
	rp, err := c.ref.ConsistencyProof(old, new)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.Join(rp, nil), bytes.Join(toBytes(p), nil)) {
		t.Errorf("ConsistencyProof(%d, %d) differs from testonly.Tree's", old, new)
	}
	if old == 0 {
		return // tlog has no proofs from the empty tree
	}
	tp, err := tlog.ProveTree(int64(new), int64(old), c.tl)
	if err != nil {
		t.Fatal(err)
	}
	if !equalProofs(p, fromTlog(tp)) {
		t.Errorf("ConsistencyProof(%d, %d) = %v, tlog.ProveTree = %v", old, new, p, tp)
	}
	if err := tlog.CheckTree(tlog.TreeProof(toTlog(p)), int64(new), tlog.Hash(newRoot), int64(old), tlog.Hash(oldRoot)); err != nil {
		t.Errorf("tlog.CheckTree rejects ConsistencyProof(%d, %d): %v", old, new, err)
	}
}

func toTlog(p []Hash) []tlog.Hash {
	out := make([]tlog.Hash, len(p))
	for i := range p {
		out[i] = tlog.Hash(p[i])
	}
	return out
}

// TestCrossCheckExhaustive checks every root, every (index, size) inclusion
// proof and every (old, new) consistency proof of a 64-leaf tree.
func TestCrossCheckExhaustive(t *testing.T) {
	const n = 64
	leaves := randomLeaves(1, n)
	for _, sk := range storeKinds {
		t.Run(sk.name, func(t *testing.T) {
			c := newCrossChecker(t, buildTree(t, sk.open(t), leaves), leaves)
			for size := uint64(0); size <= n; size++ {
				c.root(size)
				for index := uint64(0); index < size; index++ {
					c.inclusion(index, size)
				}
				for old := uint64(0); old <= size; old++ {
					c.consistency(old, size)
				}
			}
		})
	}
}

// TestCrossCheckRandom checks random roots and proofs of a 5000-leaf tree,
// plus the edges: powers of two and their neighbours, first and last leaves.
func TestCrossCheckRandom(t *testing.T) {
	const n = 5000
	leaves := randomLeaves(2, n)
	r := rand.New(rand.NewPCG(3, 0))
	var sizes []uint64
	for p := uint64(1); p <= n; p *= 2 {
		sizes = append(sizes, p-1, p, p+1)
	}
	sizes = append(sizes, n-1, n)
	for range 200 {
		sizes = append(sizes, 1+r.Uint64N(n))
	}
	for _, sk := range storeKinds {
		t.Run(sk.name, func(t *testing.T) {
			c := newCrossChecker(t, buildTree(t, sk.open(t), leaves), leaves)
			for _, size := range sizes {
				if size == 0 || size > n {
					continue
				}
				c.root(size)
				for _, index := range []uint64{0, size - 1, r.Uint64N(size), r.Uint64N(size)} {
					c.inclusion(index, size)
				}
				for _, old := range []uint64{0, 1, size, size - 1, 1 + r.Uint64N(size), 1 + r.Uint64N(size)} {
					if old <= size {
						c.consistency(old, size)
					}
				}
			}
			for range 300 {
				a, b := 1+r.Uint64N(n), 1+r.Uint64N(n)
				c.consistency(min(a, b), max(a, b))
				size := 1 + r.Uint64N(n)
				c.inclusion(r.Uint64N(size), size)
			}
		})
	}
}

// TestTreeGrowsConsistently checks, while a tree grows, that each new root is
// consistent with every earlier one through proofs computed at that moment.
func TestTreeGrowsConsistently(t *testing.T) {
	leaves := randomLeaves(4, 100)
	tr := buildTree(t, NewMemoryStore(), nil)
	roots := []Hash{tr.Root()}
	for i, h := range leaves {
		tr.Append(h)
		roots = append(roots, tr.Root())
		for old := range uint64(i + 1) {
			p, err := tr.ConsistencyProof(old, uint64(i+1))
			if err != nil {
				t.Fatal(err)
			}
			if err := VerifyConsistency(old, uint64(i+1), roots[old], roots[i+1], p); err != nil {
				t.Fatalf("size %d: consistency from %d: %v", i+1, old, err)
			}
		}
	}
}

func TestTreeResume(t *testing.T) {
	leaves := randomLeaves(5, 300)
	for _, sk := range storeKinds {
		t.Run(sk.name, func(t *testing.T) {
			store := sk.open(t)
			ref := buildTree(t, NewMemoryStore(), leaves)
			tr := buildTree(t, store, leaves[:123])
			tr2, err := NewTree(store)
			if err != nil {
				t.Fatal(err)
			}
			if tr2.Size() != 123 || tr2.Root() != tr.Root() {
				t.Fatalf("resumed tree: size %d root %s, want 123 %s", tr2.Size(), tr2.Root(), tr.Root())
			}
			for _, h := range leaves[123:] {
				tr2.Append(h)
			}
			if tr2.Root() != ref.Root() {
				t.Fatalf("resumed tree root %s, want %s", tr2.Root(), ref.Root())
			}
		})
	}
}

func TestNewTreeCompletesLevels(t *testing.T) {
	leaves := randomLeaves(6, 77)
	ref := buildTree(t, NewMemoryStore(), leaves)
	s := NewMemoryStore()
	for _, h := range leaves {
		s.Append(0, h) // leaf hashes only
	}
	tr, err := NewTree(s)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Root() != ref.Root() {
		t.Fatalf("root %s, want %s", tr.Root(), ref.Root())
	}
	for l := uint8(0); l < MaxLevel; l++ {
		if s.Len(l+1) != s.Len(l)/2 {
			t.Fatalf("level %d has %d hashes, level %d has %d", l+1, s.Len(l+1), l, s.Len(l))
		}
	}
	// A store whose upper level claims more than its leaves support.
	bad := NewMemoryStore()
	bad.Append(0, leaves[0])
	bad.Append(1, leaves[1])
	if _, err := NewTree(bad); !errors.Is(err, ErrCorruptStore) {
		t.Fatalf("NewTree of inconsistent store: %v, want ErrCorruptStore", err)
	}
}

func TestTreeRangeErrors(t *testing.T) {
	tr := buildTree(t, NewMemoryStore(), randomLeaves(7, 10))
	check := func(name string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: err = %v, want %v", name, err, want)
		}
	}
	_, err := tr.RootAt(11)
	check("RootAt(11)", err, ErrSizeOutOfRange)
	_, err = tr.LeafHash(10)
	check("LeafHash(10)", err, ErrIndexOutOfRange)
	_, err = tr.InclusionProof(0, 11)
	check("InclusionProof(0, 11)", err, ErrSizeOutOfRange)
	_, err = tr.InclusionProof(5, 5)
	check("InclusionProof(5, 5)", err, ErrIndexOutOfRange)
	_, err = tr.InclusionProof(0, 0)
	check("InclusionProof(0, 0)", err, ErrIndexOutOfRange)
	_, err = tr.ConsistencyProof(3, 11)
	check("ConsistencyProof(3, 11)", err, ErrSizeOutOfRange)
	_, err = tr.ConsistencyProof(4, 3)
	check("ConsistencyProof(4, 3)", err, ErrSizeOutOfRange)

	if r, err := tr.RootAt(0); err != nil || r != EmptyRoot {
		t.Errorf("RootAt(0) = %s, %v", r, err)
	}
	for _, c := range [][2]uint64{{0, 0}, {0, 7}, {0, 10}, {7, 7}} {
		p, err := tr.ConsistencyProof(c[0], c[1])
		if err != nil || p == nil || len(p) != 0 {
			t.Errorf("ConsistencyProof(%d, %d) = %v, %v; want empty", c[0], c[1], p, err)
		}
	}
	if p, err := tr.InclusionProof(0, 1); err != nil || len(p) != 0 {
		t.Errorf("InclusionProof(0, 1) = %v, %v; want empty", p, err)
	}
}

// failingStore fails Append after a number of successful appends.
type failingStore struct {
	HashStore
	left int
}

func (s *failingStore) Append(level uint8, h Hash) error {
	if s.left == 0 {
		return errors.New("disk full")
	}
	s.left--
	return s.HashStore.Append(level, h)
}

func TestTreeStickyStoreError(t *testing.T) {
	leaves := randomLeaves(8, 8)
	ref := buildTree(t, NewMemoryStore(), leaves)
	// 8 leaves take 15 store appends; fail each one in turn.
	for left := range 15 {
		s := &failingStore{HashStore: NewMemoryStore(), left: left}
		tr, err := NewTree(s)
		if err != nil {
			t.Fatal(err)
		}
		var failed bool
		for i, h := range leaves {
			// No Root call before the append: its cache must not hide a
			// frontier damaged by the failure.
			if _, err := tr.Append(h); err == nil {
				continue
			}
			failed = true
			if want, _ := ref.RootAt(uint64(i)); tr.Size() != uint64(i) || tr.Root() != want {
				t.Fatalf("fail after %d appends: a failed append changed the tree", left)
			}
			s.left = 100
			if _, err := tr.Append(h); err == nil {
				t.Fatalf("fail after %d appends: append after a store failure succeeded; the tree must refuse", left)
			}
			// Reopening the store resumes correctly.
			tr2, err := NewTree(s.HashStore)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range leaves[tr2.Size():] {
				tr2.Append(h)
			}
			if tr2.Root() != ref.Root() {
				t.Fatalf("fail after %d appends: resumed tree has the wrong root", left)
			}
			break
		}
		if !failed {
			t.Fatalf("no failure with %d appends allowed", left)
		}
	}
}

// TestTreeConcurrentReaders runs readers that verify proofs against the roots
// they see while one writer appends. Run with -race to check locking.
func TestTreeConcurrentReaders(t *testing.T) {
	for _, sk := range storeKinds {
		t.Run(sk.name, func(t *testing.T) {
			leaves := randomLeaves(9, 600)
			tr := buildTree(t, sk.open(t), leaves[:1])
			var wg sync.WaitGroup
			stop := make(chan struct{})
			errc := make(chan error, 4)
			for g := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 1))
					for {
						select {
						case <-stop:
							return
						default:
						}
						size := tr.Size()
						root, err := tr.RootAt(size)
						if err != nil {
							errc <- err
							return
						}
						i := r.Uint64N(size)
						p, err := tr.InclusionProof(i, size)
						if err == nil {
							err = VerifyInclusion(i, size, leaves[i], p, root)
						}
						old := 1 + r.Uint64N(size)
						oldRoot, _ := tr.RootAt(old)
						cp, err2 := tr.ConsistencyProof(old, size)
						if err2 == nil {
							err2 = VerifyConsistency(old, size, oldRoot, root, cp)
						}
						if err = errors.Join(err, err2); err != nil {
							errc <- err
							return
						}
					}
				}()
			}
			for _, h := range leaves[1:] {
				if _, err := tr.Append(h); err != nil {
					t.Error(err)
				}
			}
			close(stop)
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Error(err)
			}
		})
	}
}

// TestTreeNextMatchesAppend: what Next predicts is what Append then gives, on both
// stores, from the empty tree through sizes with every frontier shape up to 300.
func TestTreeNextMatchesAppend(t *testing.T) {
	for name, store := range map[string]HashStore{"memory": NewMemoryStore(), "file": mustFileStore(t)} {
		tree, err := NewTree(store)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 300 {
			leaf := LeafHash(fmt.Appendf(nil, "leaf %d", i))
			idx, root, proof := tree.Next(leaf)
			got, err := tree.Append(leaf)
			if err != nil || got != idx {
				t.Fatalf("%s: Next said index %d, Append gave %d (%v)", name, idx, got, err)
			}
			if want := tree.Root(); root != want {
				t.Fatalf("%s size %d: Next root %s, tree root %s", name, idx+1, root, want)
			}
			want, err := tree.InclusionProof(idx, idx+1)
			if err != nil || !slices.Equal(proof, want) {
				t.Fatalf("%s size %d: Next proof %v, tree proof %v (%v)", name, idx+1, proof, want, err)
			}
			if err := VerifyInclusion(idx, idx+1, leaf, proof, root); err != nil {
				t.Fatalf("%s size %d: %v", name, idx+1, err)
			}
		}
	}
}

func mustFileStore(t *testing.T) HashStore {
	t.Helper()
	s, err := OpenFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
