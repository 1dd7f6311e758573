package merkle

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// LineWriter appends lines to a log file without keeping a tree or an index: for a
// process whose tree lives elsewhere (the log server keeps its tree in the
// sequencer's store and writes the file as a projection). Its memory stays flat as
// the log grows. Like OpenLogFile it validates every line on open, truncates a torn
// last line with a warning, and locks the file.
type LineWriter struct {
	path  string
	f     *os.File
	count uint64
	end   int64
	buf   []byte
}

// OpenLineWriter opens (or creates) the log file at path and counts its lines.
func OpenLineWriter(path string, logger *slog.Logger) (*LineWriter, error) {
	return ResumeLineWriter(path, logger, 0, 0)
}

// ResumeLineWriter is OpenLineWriter for a file known to hold lines complete lines in
// its first offset bytes (as recorded after an fsynced Append): only the rest is read
// and validated, so opening a large file costs what was written since. When the file
// is shorter than offset, it is read from the start.
func ResumeLineWriter(path string, logger *slog.Logger, lines uint64, offset int64) (*LineWriter, error) {
	if logger == nil {
		logger = slog.Default()
	}
	f, err := openLocked(path, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	w := &LineWriter{path: path, f: f}
	if fi, err := f.Stat(); err != nil || fi.Size() < offset || offset < 0 {
		lines, offset = 0, 0
	}
	w.count = lines
	s := newLineScanner(io.NewSectionReader(f, offset, 1<<62))
	for {
		_, err := s.next()
		if err == io.EOF {
			break
		}
		var torn *tornError
		if errors.As(err, &torn) {
			abs := *torn // the scanner counts from offset
			abs.offset += offset
			abs.line += int(lines)
			if err := repairTorn(f, path, &abs, logger); err != nil {
				f.Close()
				return nil, err
			}
			s.off = torn.offset
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		w.count++
	}
	w.end = offset + s.off
	return w, nil
}

// Offset is the byte length of the file's complete lines.
func (w *LineWriter) Offset() int64 { return w.end }

// Count is the number of lines (leaves) in the file.
func (w *LineWriter) Count() uint64 { return w.count }

// Append writes entries as lines in one write and one fsync. On error nothing is
// counted and the file is cut back to where it was.
func (w *LineWriter) Append(entries []Entry) error {
	w.buf = w.buf[:0]
	for _, e := range entries {
		var err error
		if w.buf, _, err = appendLine(w.buf, e); err != nil {
			return err
		}
	}
	if _, err := w.f.WriteAt(w.buf, w.end); err != nil {
		_ = w.f.Truncate(w.end)
		return err
	}
	if err := w.f.Sync(); err != nil {
		_ = w.f.Truncate(w.end)
		return err
	}
	w.end += int64(len(w.buf))
	w.count += uint64(len(entries))
	return nil
}

// Close closes the file.
func (w *LineWriter) Close() error { return w.f.Close() }

// repairTorn cuts a torn last line (left by a crash mid-append, never acknowledged)
// off the file, fsyncs, and says so.
func repairTorn(f *os.File, path string, torn *tornError, logger *slog.Logger) error {
	if err := f.Truncate(torn.offset); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	logger.Warn("merkle: truncated torn last line of log file",
		"file", path, "line", torn.line, "offset", torn.offset,
		"dropped_bytes", torn.size, "reason", torn.reason.Error())
	return nil
}
