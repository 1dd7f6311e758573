package projections

import (
	"math/bits"
	"slices"
)

// KeepRecent is how many of a tenant's newest checkpoints are always kept.
const KeepRecent = 64

// ThinCheckpoints is the retention rule of a tenant's published checkpoints (files,
// the checkpointer's memory and the database rows alike): it returns which of sizes
// (the tree sizes of the checkpoints held, any order) to delete. Kept are the
// KeepRecent largest, and of the older ones the smallest in each power-of-two range
// of sizes [2^k, 2^(k+1)): at most KeepRecent + 64 per tenant, whatever its age.
//
// The rule is stable: a checkpoint kept as the smallest of its range stays the
// smallest (new checkpoints only grow), so a checkpoint once past the recent window
// is either kept for good or deleted then. The latest checkpoint (latest.json, the
// heartbeat's reference, what witnesses fetch and log-check compares) is always kept.
func ThinCheckpoints(sizes []uint64) []uint64 {
	if len(sizes) <= KeepRecent {
		return nil
	}
	s := slices.Clone(sizes)
	slices.Sort(s)
	old := s[:len(s)-KeepRecent]
	var drop []uint64
	for i, size := range old {
		if i > 0 && bits.Len64(old[i-1]) == bits.Len64(size) {
			drop = append(drop, size) // a smaller one holds this range
		}
	}
	return drop
}
