package merkle

import (
	"errors"
	"io"
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
