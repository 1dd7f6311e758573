package sequencer

import (
	"encoding/binary"

	"svc.dev/svc/merkle"
)

// recent remembers the last cap leaf hashes appended, by their first 8 bytes. A hit is
// a candidate that the caller confirms against the tree, so collisions cost a read and
// never a wrong answer. Memory: about 40 bytes an entry.
type recent struct {
	idx  map[uint64]uint64 // hash prefix → leaf index
	ring []uint64          // hash prefixes in append order, for eviction
	next int
	full bool
}

func newRecent(cap int) *recent {
	return &recent{idx: make(map[uint64]uint64, cap), ring: make([]uint64, cap)}
}

func prefix(h merkle.Hash) uint64 { return binary.BigEndian.Uint64(h[:8]) }

func (r *recent) get(h merkle.Hash) (uint64, bool) {
	i, ok := r.idx[prefix(h)]
	return i, ok
}

func (r *recent) add(h merkle.Hash, index uint64) {
	p := prefix(h)
	if r.full {
		old := r.ring[r.next]
		if i, ok := r.idx[old]; ok && i+uint64(len(r.ring)) <= index {
			delete(r.idx, old)
		}
	}
	r.idx[p] = index
	r.ring[r.next] = p
	r.next++
	if r.next == len(r.ring) {
		r.next, r.full = 0, true
	}
}
