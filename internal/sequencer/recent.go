package sequencer

import (
	"encoding/binary"

	"svc.dev/svc/merkle"
)

// recent remembers the last cap leaf hashes appended, by their first 8 bytes. A hit is
// a candidate that the caller confirms against the tree, so a collision never gives a
// wrong answer. Two leaves whose hashes share a prefix (a producer in hash-only mode
// chooses its hashes, so it can make them collide on purpose) are both remembered: the
// first by its prefix, the later ones by their whole hash in overflow, so a repeated
// leaf is always found and never gets a second index.
//
// Memory follows use: about 40 bytes a leaf remembered, growing with the log up to
// cap leaves (the ring doubles as it fills, the maps grow as Go maps do), so a tenant
// with a thousand leaves costs some 40 KiB, not the 40 MiB of a full window.
type recent struct {
	idx      map[uint64]uint64      // hash prefix → leaf index
	overflow map[merkle.Hash]uint64 // whole hash → leaf index, for prefixes taken by another leaf
	ring     []uint64               // hash prefixes in append order, for eviction; grows up to cap
	cap      int                    // the window: how many of the latest leaves are remembered
	sweepAt  int                    // len(overflow) at which entries out of the window are dropped
	next     int                    // once full, the ring's oldest entry, overwritten next
	full     bool
}

func newRecent(cap int) *recent {
	return &recent{idx: map[uint64]uint64{}, overflow: map[merkle.Hash]uint64{}, cap: cap}
}

func prefix(h merkle.Hash) uint64 { return binary.BigEndian.Uint64(h[:8]) }

// get returns the index of the leaf that may have hash h: the caller confirms it.
func (r *recent) get(h merkle.Hash) (uint64, bool) {
	if i, ok := r.overflow[h]; ok {
		return i, true
	}
	i, ok := r.idx[prefix(h)]
	return i, ok
}

// add remembers the leaf h at index, the newest of the log, forgetting the leaves
// more than cap behind it.
func (r *recent) add(h merkle.Hash, index uint64) {
	p := prefix(h)
	window := uint64(r.cap)
	if r.full {
		old := r.ring[r.next]
		if i, ok := r.idx[old]; ok && i+window <= index {
			delete(r.idx, old)
		}
	}
	if i, taken := r.idx[p]; taken && i+window > index {
		r.overflow[h] = index
		if len(r.overflow) >= r.sweepAt {
			for k, i := range r.overflow {
				if i+window <= index {
					delete(r.overflow, k)
				}
			}
			r.sweepAt = max(2*len(r.overflow), 64) // amortized O(1) an add
		}
	} else {
		r.idx[p] = index
	}
	if !r.full {
		r.push(p)
		return
	}
	r.ring[r.next] = p
	r.next++
	if r.next == len(r.ring) {
		r.next = 0
	}
}

// push appends p to a ring not yet full, doubling its capacity (never past cap) when
// needed; the ring is full, and wraps from then on, once it holds cap entries.
func (r *recent) push(p uint64) {
	if len(r.ring) == cap(r.ring) {
		grown := make([]uint64, len(r.ring), min(max(2*len(r.ring), 256), r.cap))
		copy(grown, r.ring)
		r.ring = grown
	}
	r.ring = append(r.ring, p)
	if len(r.ring) == r.cap {
		r.full, r.next = true, 0
	}
}
