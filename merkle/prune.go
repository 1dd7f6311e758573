package merkle

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
)

// PruneLogFile rewrites the log file at path so that each leaf line (kind
// LineLeaf) for which prune(index, leaf) returns true becomes
// {"pruned":"<leaf hash>"}, and returns how many lines it pruned. Hash and
// pruned lines, and leaf lines kept, are copied byte for byte. Since only
// leaf hashes enter the tree, no root and no proof changes.
//
// The rewrite is atomic: a temporary file in the same directory is written,
// fsynced and renamed over path, and the directory fsynced; the file's
// permission bits are kept. If nothing is pruned the file is left untouched.
// A torn last line is dropped as OpenLogFile drops it (with a warning to
// slog.Default); any other malformed line fails the prune and changes
// nothing.
//
// The file must not be open: PruneLogFile locks it and fails with ErrLocked
// if a LogFile holds it. It reads the file in one pass, in memory
// independent of its size.
func PruneLogFile(path string, prune func(index uint64, leaf string) bool) (int, error) {
	f, err := openLocked(path, os.O_RDWR)
	if err != nil {
		return 0, err
	}
	defer f.Close() // releases the lock, after the rename
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".prune-*")
	if err != nil {
		return 0, err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()

	w := bufio.NewWriterSize(tmp, 64<<10)
	s := newLineScanner(f)
	pruned, torn := 0, false
	for index := uint64(0); ; index++ {
		line, err := s.next()
		if err == io.EOF {
			break
		}
		var t *tornError
		if errors.As(err, &t) {
			slog.Default().Warn("merkle: dropping torn last line of log file while pruning",
				"file", path, "line", t.line, "offset", t.offset,
				"dropped_bytes", t.size, "reason", t.reason.Error())
			torn = true
			break
		}
		if err != nil {
			return 0, fmt.Errorf("merkle: prune log file %s: %w", path, err)
		}
		if line.entry.Kind == LineLeaf && prune(index, line.entry.Leaf) {
			w.WriteString(`{"pruned":"`)
			w.WriteString(line.entry.Hash.String())
			w.WriteString("\"}\n")
			pruned++
		} else {
			w.Write(line.raw)
			w.WriteByte('\n')
		}
	}
	if pruned == 0 && !torn {
		return 0, nil
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	if err := tmp.Chmod(st.Mode().Perm()); err != nil {
		return 0, err
	}
	if err := tmp.Sync(); err != nil {
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, err
	}
	done = true
	if err := syncDir(dir); err != nil {
		return pruned, err
	}
	return pruned, nil
}
