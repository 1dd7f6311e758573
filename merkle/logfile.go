package merkle

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

// LogFileOptions configures OpenLogFile. The zero value is ready to use.
type LogFileOptions struct {
	// Logger receives warnings, such as a repaired torn last line.
	// nil means slog.Default().
	Logger *slog.Logger
	// Store holds the tree's hashes. nil means NewMemoryStore(). A
	// persistent store (OpenFileStore) saves rebuilding the tree's upper
	// levels but not reading the file: every leaf it holds is checked
	// against the file. On success the LogFile owns the store and closes
	// it; on failure the caller still owns it.
	Store HashStore
}

// A LogFile is SPEC.md's log file, open for appending, with the Merkle tree
// of its leaves. Its methods are safe for concurrent use; appends are
// serialised.
//
// Memory: besides the tree's store (about 64 bytes a leaf in memory, near
// nothing with OpenFileStore), a LogFile keeps the byte offset of every line
// (8 bytes a leaf) and a map from leaf hash to index for IndexOf (roughly 40
// to 90 bytes a leaf, depending on the map's load), but never the lines
// themselves.
type LogFile struct {
	mu      sync.RWMutex
	path    string
	f       *os.File
	logger  *slog.Logger
	store   HashStore
	tree    *Tree
	offsets []int64         // offsets[i] is the byte offset of line i
	end     int64           // byte offset after the last line: the file's size
	index   map[Hash]uint64 // leaf hash to its first index
	err     error           // sticky error of a failed append
	closed  bool
}

// OpenLogFile opens the log file at path, creating it (mode 0644) if absent,
// and rebuilds the tree from its lines.
//
// A bad last line, as a crash in the middle of an append leaves it (no
// newline at the end, or a malformed line at the end of the file), was never
// acknowledged: it is truncated away, the file is fsynced, and a warning
// naming the file, the byte offset and the number of bytes dropped goes to
// the logger. Any other malformed line, or a line over MaxLineSize, is an
// error naming the line (a *LineError); nothing is dropped silently.
//
// If opts.Store already holds leaves, they must be the file's first leaves
// (else an error wrapping ErrCorruptStore); the leaves it lacks are
// appended to it.
//
// The file is locked (see package doc) until Close: a second OpenLogFile or
// a PruneLogFile of the same file fails with ErrLocked.
func OpenLogFile(path string, opts LogFileOptions) (*LogFile, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	f, err := openLocked(path, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	l, err := openLogFile(path, f, logger, opts.Store)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("merkle: open log file %s: %w", path, err)
	}
	return l, nil
}

func openLogFile(path string, f *os.File, logger *slog.Logger, store HashStore) (*LogFile, error) {
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if st.Size() == 0 {
		// Perhaps just created: make its directory entry durable before
		// anything is acknowledged from it.
		if err := syncDir(filepath.Dir(path)); err != nil {
			return nil, err
		}
	}
	if store == nil {
		store = NewMemoryStore()
	}
	tree, err := NewTree(store)
	if err != nil {
		return nil, err
	}
	have := tree.Size()
	l := &LogFile{
		path:   path,
		f:      f,
		logger: logger,
		store:  store,
		tree:   tree,
		index:  make(map[Hash]uint64),
	}
	s := newLineScanner(io.NewSectionReader(f, 0, 1<<62))
	for {
		line, err := s.next()
		if err == io.EOF {
			break
		}
		var torn *tornError
		if errors.As(err, &torn) {
			if err := repairTorn(f, path, torn, logger); err != nil {
				return nil, err
			}
			s.off = torn.offset
			break
		}
		if err != nil {
			return nil, err
		}
		i := uint64(len(l.offsets))
		h := line.entry.Hash
		if i < have {
			stored, err := tree.LeafHash(i)
			if err != nil {
				return nil, err
			}
			if stored != h {
				return nil, fmt.Errorf("%w: leaf %d (line %d) has hash %s in the file but %s in the store; the store belongs to another log, delete it to rebuild",
					ErrCorruptStore, i, i+1, h, stored)
			}
		} else if _, err := tree.Append(h); err != nil {
			return nil, err
		}
		l.offsets = append(l.offsets, line.start)
		if _, dup := l.index[h]; !dup {
			l.index[h] = i
		}
	}
	l.end = s.off
	if n := uint64(len(l.offsets)); have > n {
		return nil, fmt.Errorf("%w: the store has %d leaves, the log file only %d; the store belongs to another log, delete it to rebuild",
			ErrCorruptStore, have, n)
	}
	return l, nil
}

// openLocked opens path and locks it. PruneLogFile replaces a log file by
// renaming, so after locking it checks that path still names the file it
// locked, and retries if not.
func openLocked(path string, flag int) (*os.File, error) {
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(path, flag, 0o644)
		if err != nil {
			return nil, err
		}
		if err := lockFile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("merkle: %s: %w", path, err)
		}
		fi, err1 := f.Stat()
		pi, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(fi, pi) {
			return f, nil
		}
		f.Close()
		if attempt == 10 {
			return nil, fmt.Errorf("merkle: %s keeps being replaced while opening it", path)
		}
	}
}

// AppendLeaf appends a leaf line and returns the leaf's index. The leaf must
// be valid UTF-8 (else ErrInvalidLeaf) and its line at most MaxLineSize
// bytes (else ErrLineTooLong). It returns after the line is written and the
// file fsynced, and the tree updated.
func (l *LogFile) AppendLeaf(leaf string) (index uint64, err error) {
	return l.AppendBatch([]Entry{{Kind: LineLeaf, Leaf: leaf}})
}

// AppendHash appends a leaf by its leaf hash ({"hash":...}) and returns its
// index, durable as AppendLeaf.
func (l *LogFile) AppendHash(h Hash) (uint64, error) {
	return l.AppendBatch([]Entry{{Kind: LineHash, Hash: h}})
}

// AppendBatch appends entries with one write and one fdatasync (fsync where
// fdatasync is missing) and returns the
// index of the first (Size() if entries is empty). A LineLeaf entry's Hash
// may be left zero; if set it must be the leaf's hash. A LinePruned entry is
// written as such (as when importing a pruned log). The batch is all or
// nothing: an invalid entry fails it before anything is written.
//
// If writing or syncing fails, the LogFile tries to cut the file back and
// refuses all later appends: the file's state is uncertain until it is
// reopened (which keeps the batch only if it is complete on disk).
func (l *LogFile) AppendBatch(entries []Entry) (first uint64, err error) {
	var buf []byte
	hashes := make([]Hash, len(entries))
	lineLen := make([]int, len(entries))
	for i, e := range entries {
		n := len(buf)
		if buf, hashes[i], err = appendLine(buf, e); err != nil {
			return 0, fmt.Errorf("merkle: entry %d of batch: %w", i, err)
		}
		lineLen[i] = len(buf) - n
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	if l.err != nil {
		return 0, l.err
	}
	first = uint64(len(l.offsets))
	if len(entries) == 0 {
		return first, nil
	}
	if _, err := l.f.WriteAt(buf, l.end); err != nil {
		return 0, l.failLocked(err)
	}
	if err := dataSync(l.f); err != nil {
		return 0, l.failLocked(err)
	}
	if _, err := l.tree.AppendBatch(hashes); err != nil {
		l.err = fmt.Errorf("merkle: log file %s: tree update failed, reopen the log: %w", l.path, err)
		return 0, l.err
	}
	off := l.end
	for i, h := range hashes {
		l.offsets = append(l.offsets, off)
		off += int64(lineLen[i])
		if _, dup := l.index[h]; !dup {
			l.index[h] = first + uint64(i)
		}
	}
	l.end = off
	return first, nil
}

func (l *LogFile) failLocked(err error) error {
	// Best effort: remove a partial batch so that a later reopen does not
	// find it; the next open repairs a torn line anyway.
	_ = l.f.Truncate(l.end)
	l.err = fmt.Errorf("merkle: log file %s: append failed, reopen the log: %w", l.path, err)
	return l.err
}

// Tree returns the tree of the file's leaves. It is updated after each
// append is durable; use it for roots and proofs.
func (l *LogFile) Tree() *Tree { return l.tree }

// Size returns the number of leaves (lines).
func (l *LogFile) Size() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return uint64(len(l.offsets))
}

// Path returns the file's path.
func (l *LogFile) Path() string { return l.path }

// Entry reads back the line of the leaf at index, which must be below Size()
// (else an error wrapping ErrIndexOutOfRange).
func (l *LogFile) Entry(index uint64) (Entry, error) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return Entry{}, ErrClosed
	}
	if index >= uint64(len(l.offsets)) {
		n := len(l.offsets)
		l.mu.RUnlock()
		return Entry{}, fmt.Errorf("%w: entry %d, log size %d", ErrIndexOutOfRange, index, n)
	}
	start, end := l.offsets[index], l.end
	if index+1 < uint64(len(l.offsets)) {
		end = l.offsets[index+1]
	}
	f := l.f
	l.mu.RUnlock()

	// Committed lines never change while the file is open, so the read
	// needs no lock.
	buf := make([]byte, end-start)
	if _, err := f.ReadAt(buf, start); err != nil {
		return Entry{}, fmt.Errorf("merkle: log file %s: read line %d: %w", l.path, index+1, err)
	}
	if len(buf) == 0 || buf[len(buf)-1] != '\n' {
		return Entry{}, fmt.Errorf("merkle: log file %s: line %d: %w: modified while open", l.path, index+1, ErrMalformedLine)
	}
	e, err := ParseLine(buf[:len(buf)-1])
	if err != nil {
		return Entry{}, fmt.Errorf("merkle: log file %s: line %d: %w", l.path, index+1, err)
	}
	if h, err := l.tree.LeafHash(index); err != nil {
		return Entry{}, err
	} else if h != e.Hash {
		return Entry{}, fmt.Errorf("merkle: log file %s: line %d: %w: leaf hash %s, tree has %s (modified while open?)",
			l.path, index+1, ErrMalformedLine, e.Hash, h)
	}
	return e, nil
}

// IndexOf returns the index of the first leaf with leaf hash h, so that an
// append can be made idempotent.
func (l *LogFile) IndexOf(h Hash) (uint64, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	i, ok := l.index[h]
	return i, ok
}

// Close closes the file and the tree's store (syncing it). Later calls of
// any method fail with ErrClosed; the Tree stays readable only if its store
// is (a memory store is emptied).
func (l *LogFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.closed = true
	return errors.Join(l.store.Close(), l.f.Close())
}
