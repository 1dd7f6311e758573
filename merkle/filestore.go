package merkle

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

// fileFlushRecords is how many hashes a FileStore level buffers in memory
// before writing them to its file (8 KiB a level).
const fileFlushRecords = 256

// fileStore is a HashStore with one append-only file of 32-byte hashes a
// level. See OpenFileStore.
type fileStore struct {
	mu       sync.RWMutex
	dir      string
	levels   [MaxLevel + 1]*fileLevel // nil: no file yet (the level is empty)
	newFiles bool                     // files created since the last directory fsync
	closed   bool
}

type fileLevel struct {
	f       *os.File
	n       uint64 // hashes in the level, buffered ones included
	flushed uint64 // hashes written to f; the rest are in buf
	buf     []byte // hashes [flushed, n), HashSize bytes each
	dirty   bool   // written to f since its last fsync
	// edge holds the last hashes written to f (up to fileFlushRecords of them,
	// indices [flushed-len(edge)/HashSize, flushed)): with buf, the edge tile of
	// the level, from which the proofs of recent leaves read without a syscall.
	edge []byte
}

// LevelFileName returns the name of the file in which a FileStore keeps
// level: "level-00.hashes" for the leaf hashes, and so on.
func LevelFileName(level uint8) string {
	return fmt.Sprintf("level-%02d.hashes", level)
}

// OpenFileStore opens the FileStore in dir, creating dir and an empty store
// if needed. The store keeps one append-only file of 32-byte hashes a level
// (see LevelFileName) and reads them with ReadAt, so its memory stays flat as
// the log grows: at most 8 KiB of not yet written hashes a level, and a file
// descriptor a level. Get sees every appended hash, written or not; Sync
// writes and fsyncs them.
//
// On open it repairs what a crash can leave (see HashStore): a partial
// trailing record of any level is truncated away, a level with more hashes
// than the level below supports is truncated, and missing upper-level hashes
// are recomputed from the level below. Repairs are logged with slog.Default.
//
// The store locks its directory (an advisory lock on the level 0 file on
// Unix) until Close; a second open fails with ErrLocked.
func OpenFileStore(dir string) (HashStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s := &fileStore{dir: dir}
	ok := false
	defer func() {
		if !ok {
			s.closeFiles()
		}
	}()
	repaired := false
	for l := uint8(0); l <= MaxLevel; l++ {
		r, err := s.openLevel(l)
		if err != nil {
			return nil, err
		}
		repaired = repaired || r
	}
	r, err := s.repairLevels()
	if err != nil {
		return nil, err
	}
	if repaired || r {
		if err := s.Sync(); err != nil {
			return nil, err
		}
	}
	for _, lv := range s.levels {
		if lv != nil {
			if err := lv.loadEdge(); err != nil {
				return nil, err
			}
		}
	}
	ok = true
	return s, nil
}

// openLevel opens level l's file (level 0's is created and locked; a missing upper
// level is left nil) and drops a partial record at its end. It reports whether it
// repaired the file.
func (s *fileStore) openLevel(l uint8) (repaired bool, err error) {
	path := filepath.Join(s.dir, LevelFileName(l))
	var f *os.File
	if l == 0 {
		if f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644); err != nil {
			return false, err
		}
		if err := lockFile(f); err != nil {
			f.Close()
			return false, fmt.Errorf("merkle: open hash store %s: %w", s.dir, err)
		}
	} else {
		f, err = os.OpenFile(path, os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	lv := &fileLevel{f: f}
	s.levels[l] = lv
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	size := st.Size()
	if rem := size % HashSize; rem != 0 {
		slog.Default().Warn("merkle: truncating partial record of hash store level",
			"file", path, "offset", size-rem, "dropped", rem)
		if err := f.Truncate(size - rem); err != nil {
			return false, err
		}
		size -= rem
		lv.dirty, repaired = true, true
	}
	lv.n = uint64(size) / HashSize
	lv.flushed = lv.n
	return repaired, nil
}

// repairLevels truncates every level longer than the level below supports, then
// recomputes missing upper-level hashes. It reports whether it changed anything.
func (s *fileStore) repairLevels() (repaired bool, err error) {
	for l := uint8(0); l < MaxLevel; l++ {
		want := s.lenLocked(l) / 2
		if lv := s.levels[l+1]; lv != nil && lv.n > want {
			slog.Default().Warn("merkle: truncating hash store level to match the level below",
				"file", lv.f.Name(), "hashes", lv.n, "kept", want)
			if err := lv.f.Truncate(int64(want) * HashSize); err != nil {
				return false, err
			}
			lv.n, lv.flushed = want, want
			lv.dirty, repaired = true, true
		}
	}
	before := s.totalLen()
	if err := completeLevels(s); err != nil {
		return false, err
	}
	if after := s.totalLen(); after != before {
		slog.Default().Warn("merkle: recomputed missing hashes of hash store",
			"dir", s.dir, "hashes", after-before)
		repaired = true
	}
	return repaired, nil
}

func (s *fileStore) totalLen() uint64 {
	var n uint64
	for l := range s.levels {
		n += s.lenLocked(uint8(l))
	}
	return n
}

func (s *fileStore) Get(level uint8, index uint64) (Hash, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return Hash{}, ErrClosed
	}
	if level > MaxLevel || s.levels[level] == nil || index >= s.levels[level].n {
		return Hash{}, fmt.Errorf("%w: hash %d of level %d, store has %d", ErrIndexOutOfRange, index, level, s.lenLocked(level))
	}
	lv := s.levels[level]
	var h Hash
	if index >= lv.flushed {
		copy(h[:], lv.buf[(index-lv.flushed)*HashSize:])
		return h, nil
	}
	if e := uint64(len(lv.edge) / HashSize); index >= lv.flushed-e {
		copy(h[:], lv.edge[(index-(lv.flushed-e))*HashSize:])
		return h, nil
	}
	if _, err := lv.f.ReadAt(h[:], int64(index)*HashSize); err != nil {
		return Hash{}, fmt.Errorf("merkle: read hash %d of level %d: %w", index, level, err)
	}
	return h, nil
}

func (s *fileStore) Append(level uint8, h Hash) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := appendable(s.closed, level); err != nil {
		return err
	}
	lv := s.levels[level]
	if lv == nil {
		// O_EXCL: OpenFileStore saw no file, so one now is someone else's.
		f, err := os.OpenFile(filepath.Join(s.dir, LevelFileName(level)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		lv = &fileLevel{f: f}
		s.levels[level] = lv
		s.newFiles = true
	}
	lv.buf = append(lv.buf, h[:]...)
	lv.n++
	if lv.n-lv.flushed >= fileFlushRecords {
		return lv.flush()
	}
	return nil
}

// flush writes the buffered hashes to the file. A failed write leaves them
// buffered; the next flush rewrites the same bytes at the same offset.
func (lv *fileLevel) flush() error {
	if len(lv.buf) == 0 {
		return nil
	}
	if _, err := lv.f.WriteAt(lv.buf, int64(lv.flushed)*HashSize); err != nil {
		return err
	}
	lv.flushed = lv.n
	lv.edge = append(lv.edge, lv.buf...)
	if keep := fileFlushRecords * HashSize; len(lv.edge) > keep {
		lv.edge = append(lv.edge[:0], lv.edge[len(lv.edge)-keep:]...)
	}
	lv.buf = lv.buf[:0]
	lv.dirty = true
	return nil
}

// loadEdge reads the level's last hashes on file into edge.
func (lv *fileLevel) loadEdge() error {
	e := min(lv.flushed, fileFlushRecords)
	lv.edge = make([]byte, e*HashSize, fileFlushRecords*HashSize*2)
	if e == 0 {
		return nil
	}
	_, err := lv.f.ReadAt(lv.edge, int64(lv.flushed-e)*HashSize)
	return err
}

func (s *fileStore) Len(level uint8) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lenLocked(level)
}

func (s *fileStore) lenLocked(level uint8) uint64 {
	if level > MaxLevel || s.levels[level] == nil {
		return 0
	}
	return s.levels[level].n
}

func (s *fileStore) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.syncLocked()
}

func (s *fileStore) syncLocked() error {
	for _, lv := range s.levels {
		if lv == nil {
			continue
		}
		if err := lv.flush(); err != nil {
			return err
		}
		if lv.dirty {
			if err := lv.f.Sync(); err != nil {
				return err
			}
			lv.dirty = false
		}
	}
	if s.newFiles {
		if err := syncDir(s.dir); err != nil {
			return err
		}
		s.newFiles = false
	}
	return nil
}

func (s *fileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	err := s.syncLocked()
	s.closed = true
	return errors.Join(err, s.closeFiles())
}

func (s *fileStore) closeFiles() error {
	var errs []error
	for i, lv := range s.levels {
		if lv != nil {
			errs = append(errs, lv.f.Close())
			s.levels[i] = nil
		}
	}
	return errors.Join(errs...)
}
