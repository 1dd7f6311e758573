package sequencer

import (
	"encoding/binary"
	"testing"

	"svc.dev/svc/merkle"
)

func hashOf(i uint64) merkle.Hash {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], i)
	return merkle.LeafHash(b[:])
}

// TestRecentGrowsWithUse: the window's memory follows the log (a thousand leaves
// take a ring of at most 2,048 entries, not the window's 2^20), every leaf within
// the window is found, and leaves that fell out of it are forgotten once the ring
// wraps.
func TestRecentGrowsWithUse(t *testing.T) {
	r := newRecent(1 << 20)
	for i := range uint64(1000) {
		r.add(hashOf(i), i)
	}
	if c := cap(r.ring); c > 2048 {
		t.Fatalf("ring capacity %d after 1,000 leaves of a 2^20 window", c)
	}
	for i := range uint64(1000) {
		if got, ok := r.get(hashOf(i)); !ok || got != i {
			t.Fatalf("leaf %d: %d %v", i, got, ok)
		}
	}
	small := newRecent(300)
	for i := range uint64(1000) {
		small.add(hashOf(i), i)
	}
	if len(small.ring) != 300 || cap(small.ring) != 300 {
		t.Fatalf("ring of a 300-leaf window: len %d cap %d", len(small.ring), cap(small.ring))
	}
	for i := range uint64(1000) {
		_, ok := small.get(hashOf(i))
		if want := i >= 700; ok != want {
			t.Fatalf("leaf %d remembered %v, want %v", i, ok, want)
		}
	}
	// A prefix shared on purpose (hash-only mode): both leaves are found.
	a, b := hashOf(5000), hashOf(5001)
	copy(b[:8], a[:8])
	small.add(a, 1000)
	small.add(b, 1001)
	if i, ok := small.get(a); !ok || i != 1000 {
		t.Fatalf("first of a shared prefix: %d %v", i, ok)
	}
	if i, ok := small.get(b); !ok || i != 1001 {
		t.Fatalf("second of a shared prefix: %d %v", i, ok)
	}
}
