package merkle

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ScanLogFile is ReadLogFile without holding the file: each gets every entry in
// order, and the entry's Leaf is not kept after it returns. It stops at the first
// malformed line (ReadLogFile's error, ErrTornLine for a bad last line) or the first
// error of each, and returns that error.
func ScanLogFile(r io.Reader, each func(Entry) error) error {
	s := newLineScanner(r)
	for {
		l, err := s.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := each(l.entry); err != nil {
			return err
		}
	}
}

// ScanLogPath is ScanLogFile over the log file at path, opened read-only: it never
// writes to the file (unlike OpenLogFile, which repairs a torn tail). An error opening
// the file is os.Open's, which names it; an error of the scan (ScanLogFile's, or each's)
// is returned as "<label>: <error>", label naming the file as the caller's messages do.
func ScanLogPath(path, label string, each func(Entry) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := ScanLogFile(f, each); err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	return nil
}
