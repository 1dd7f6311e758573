package merkle

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// storeKinds are the HashStore implementations every tree test runs over.
var storeKinds = []struct {
	name string
	open func(t testing.TB) HashStore
}{
	{"memory", func(t testing.TB) HashStore { return NewMemoryStore() }},
	{"file", func(t testing.TB) HashStore {
		s, err := OpenFileStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

// randomLeaves returns n leaf hashes of random leaves of random length.
func randomLeaves(seed uint64, n int) []Hash {
	r := rand.New(rand.NewPCG(seed, 0))
	out := make([]Hash, n)
	for i := range out {
		data := make([]byte, r.IntN(100))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		out[i] = LeafHash(data)
	}
	return out
}

// indexLeaf is a cheap deterministic leaf hash for benchmarks.
func buildTree(t testing.TB, store HashStore, leaves []Hash) *Tree {
	t.Helper()
	tr, err := NewTree(store)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range leaves {
		idx, err := tr.Append(h)
		if err != nil {
			t.Fatal(err)
		}
		if idx != uint64(i) {
			t.Fatalf("Append returned index %d, want %d", idx, i)
		}
	}
	return tr
}

// tlogStore keeps the hashes of a golang.org/x/mod/sumdb/tlog tree: an
// independent implementation with its own storage layout.
type tlogStore struct {
	hashes []tlog.Hash
	n      int64
}

func (s *tlogStore) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(s.hashes)) {
			return nil, fmt.Errorf("tlogStore: no hash %d", x)
		}
		out[i] = s.hashes[x]
	}
	return out, nil
}

func newTlogStore(t testing.TB, leaves []Hash) *tlogStore {
	s := &tlogStore{}
	for _, h := range leaves {
		hs, err := tlog.StoredHashesForRecordHash(s.n, tlog.Hash(h), s)
		if err != nil {
			t.Fatal(err)
		}
		s.hashes = append(s.hashes, hs...)
		s.n++
	}
	return s
}

func toBytes(p []Hash) [][]byte {
	out := make([][]byte, len(p))
	for i := range p {
		out[i] = p[i][:]
	}
	return out
}

func fromTlog[T ~[]tlog.Hash](p T) []Hash {
	out := make([]Hash, len(p))
	for i := range p {
		out[i] = Hash(p[i])
	}
	return out
}

func equalProofs(a, b []Hash) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
