package merkle

import (
	"fmt"
	"io"
)

// C2SP tlog-tiles (https://c2sp.org/tlog-tiles) splits the tree into tiles of
// height 8: tile N of level L holds the hashes of store level 8L with indices
// [256N, 256N+256), each the root of a perfect subtree of 256^L leaves. A
// HashStore holds exactly those hashes, so a tile is a contiguous read of one
// level file, never recomputed.

// TileHeight is the height of a C2SP tile: a full tile holds 1<<TileHeight
// hashes.
const TileHeight = 8

// TileWidth is the number of hashes in a full tile (and entries in a full
// entry bundle).
const TileWidth = 1 << TileHeight

// MaxTileLevel is the highest tile level a tree can have: tile level L reads
// store level 8L, and a store holds levels up to MaxLevel.
const MaxTileLevel = MaxLevel / TileHeight

// rangeReader is implemented by stores that read consecutive hashes of a level
// in one call (the FileStore: one ReadAt).
type rangeReader interface {
	readRange(level uint8, from uint64, dst []byte) error
}

// TileHashes returns the hashes of tile index at tile level level, width
// hashes wide (1..TileWidth), concatenated: the body of C2SP tlog-tiles'
// /tile/<level>/<index>[.p/<width>]. The tile must lie inside the tree as it
// is now: every hash it holds is the root of a perfect subtree of leaves below
// Size(); otherwise the error wraps ErrIndexOutOfRange (the tile does not
// exist yet). A tile's content never changes once it exists.
func (t *Tree) TileHashes(level uint8, index uint64, width int) ([]byte, error) {
	if level > MaxTileLevel || width < 1 || width > TileWidth {
		return nil, fmt.Errorf("%w: tile level %d (at most %d), width %d (1..%d)", ErrIndexOutOfRange, level, MaxTileLevel, width, TileWidth)
	}
	storeLevel := level * TileHeight
	if index > (1<<(64-TileHeight))-1 {
		return nil, fmt.Errorf("%w: tile index %d", ErrIndexOutOfRange, index)
	}
	from := index << TileHeight
	size := t.Size()
	have := size >> storeLevel // hashes of that level inside the tree
	if from+uint64(width) > have || from+uint64(width) < from {
		return nil, fmt.Errorf("%w: tile %d/%d of width %d needs %d hashes of level %d, the tree of %d leaves has %d",
			ErrIndexOutOfRange, level, index, width, from+uint64(width), storeLevel, size, have)
	}
	out := make([]byte, width*HashSize)
	if rr, ok := t.store.(rangeReader); ok {
		if err := rr.readRange(storeLevel, from, out); err != nil {
			return nil, err
		}
		return out, nil
	}
	for i := 0; i < width; i++ {
		h, err := t.store.Get(storeLevel, from+uint64(i))
		if err != nil {
			return nil, err
		}
		copy(out[i*HashSize:], h[:])
	}
	return out, nil
}

// readRange reads len(dst)/HashSize hashes of level from index from: the part
// already written to the file with one ReadAt, the rest from the buffer.
func (s *fileStore) readRange(level uint8, from uint64, dst []byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	n := uint64(len(dst) / HashSize)
	lv := s.levels[level]
	if lv == nil || from+n > lv.n {
		return fmt.Errorf("%w: hashes %d..%d of level %d, store has %d", ErrIndexOutOfRange, from, from+n, level, s.lenLocked(level))
	}
	onFile := uint64(0)
	if from < lv.flushed {
		onFile = min(n, lv.flushed-from)
		if k, err := lv.f.ReadAt(dst[:onFile*HashSize], int64(from)*HashSize); k < int(onFile*HashSize) {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("merkle: read hashes %d..%d of level %d: %w", from, from+onFile, level, err)
		}
	}
	if onFile < n {
		start := from + onFile - lv.flushed
		copy(dst[onFile*HashSize:], lv.buf[start*HashSize:(start+n-onFile)*HashSize])
	}
	return nil
}
