package merkle

import (
	"fmt"
	"sync"
)

// MaxLevel is the highest level a HashStore holds: a hash at level l covers
// 1<<l leaves, and a tree has fewer than 1<<64 leaves.
const MaxLevel = 63

// A HashStore holds the hashes of the complete (perfect, aligned) subtrees of
// a tree. Level 0 holds the leaf hashes; hash i of level l, for l in
// [0, MaxLevel], is the root of leaves [i<<l, (i+1)<<l). A consistent store
// has Len(l+1) == Len(l)/2 for every level; Tree keeps it so.
//
// Durability: Append need not be durable before Sync returns. After a crash
// a persistent store may have lost any suffix of any level, independently of
// the other levels, and may hold a partial trailing record; whoever opens it
// must repair it (as OpenFileStore does) so that what it holds is a
// consistent prefix. Every hash in a store can be recomputed from the leaf
// hashes, and the leaf hashes from the log of record (the log file, or the
// LEAVES stream), so a store is a cache: it is never the durability point.
//
// Implementations must allow Get and Len to be called concurrently with each
// other; Append, Sync and Close are called by one writer at a time (Tree and
// LogFile serialise them). Both stores in this package are safe for fully
// concurrent use.
type HashStore interface {
	// Get returns hash index of level. It returns an error wrapping
	// ErrIndexOutOfRange if index >= Len(level), and sees every hash
	// appended before, synced or not.
	Get(level uint8, index uint64) (Hash, error)
	// Append appends h as the next hash of level (hash Len(level)).
	Append(level uint8, h Hash) error
	// Len returns the number of hashes in level; 0 for levels above MaxLevel.
	Len(level uint8) uint64
	// Sync makes every appended hash durable.
	Sync() error
	// Close syncs the store and releases its resources. Later calls fail
	// with ErrClosed.
	Close() error
}

// memChunk is the number of hashes in one chunk of a memory store level
// (128 KiB). Chunking avoids the copy and the 2x slack of growing one huge
// slice.
const memChunk = 1 << 12

// memoryStore is a HashStore in memory: about 64 bytes a leaf (32 for the
// leaf hash, 32 for the 1/2 + 1/4 + ... hashes above it).
type memoryStore struct {
	mu     sync.RWMutex
	levels [MaxLevel + 1][][]Hash // chunks of memChunk hashes; only the first may be shorter
	n      [MaxLevel + 1]uint64
	closed bool
}

// NewMemoryStore returns a HashStore that keeps its hashes in memory, about
// 64 bytes a leaf. It is safe for concurrent use.
func NewMemoryStore() HashStore {
	return &memoryStore{}
}

func (s *memoryStore) Get(level uint8, index uint64) (Hash, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return Hash{}, ErrClosed
	}
	if level > MaxLevel || index >= s.n[level] {
		return Hash{}, fmt.Errorf("%w: hash %d of level %d, store has %d", ErrIndexOutOfRange, index, level, s.lenLocked(level))
	}
	return s.levels[level][index/memChunk][index%memChunk], nil
}

// appendable is why a store takes no hash at level: it is closed (ErrClosed), or the
// level is above MaxLevel; nil when it takes one. Both stores' Append check with it.
func appendable(closed bool, level uint8) error {
	if closed {
		return ErrClosed
	}
	if level > MaxLevel {
		return fmt.Errorf("%w: level %d above %d", ErrIndexOutOfRange, level, MaxLevel)
	}
	return nil
}

func (s *memoryStore) Append(level uint8, h Hash) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := appendable(s.closed, level); err != nil {
		return err
	}
	chunks := s.levels[level]
	n := s.n[level]
	if n%memChunk == 0 && n > 0 {
		// The last chunk is full; a level this long will fill the next one.
		chunks = append(chunks, make([]Hash, 0, memChunk))
	} else if n == 0 {
		// The first chunk grows by append so that short upper levels
		// stay small.
		chunks = append(chunks, nil)
	}
	last := len(chunks) - 1
	chunks[last] = append(chunks[last], h)
	s.levels[level] = chunks
	s.n[level] = n + 1
	return nil
}

func (s *memoryStore) Len(level uint8) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lenLocked(level)
}

func (s *memoryStore) lenLocked(level uint8) uint64 {
	if level > MaxLevel {
		return 0
	}
	return s.n[level]
}

func (s *memoryStore) Sync() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

func (s *memoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	s.levels = [MaxLevel + 1][][]Hash{}
	return nil
}

// completeLevels makes the upper levels of s consistent with level 0: it
// appends every missing hash of level l+1 from level l. A level longer than
// it should be is corruption the store itself must repair (OpenFileStore
// does); here it is an error wrapping ErrCorruptStore.
func completeLevels(s HashStore) error {
	for l := uint8(0); l < MaxLevel; l++ {
		want := s.Len(l) / 2
		have := s.Len(l + 1)
		if have > want {
			return fmt.Errorf("%w: level %d has %d hashes, level %d has %d, want at most %d",
				ErrCorruptStore, l, s.Len(l), l+1, have, want)
		}
		for ; have < want; have++ {
			left, err := s.Get(l, 2*have)
			if err != nil {
				return err
			}
			right, err := s.Get(l, 2*have+1)
			if err != nil {
				return err
			}
			if err := s.Append(l+1, NodeHash(left, right)); err != nil {
				return err
			}
		}
	}
	return nil
}
