package merkle

import (
	"os"

	"golang.org/x/sys/unix"
)

// dataSync makes f's data durable, with the metadata needed to read it back (its
// size): fdatasync(2), which skips what an append does not need (times).
func dataSync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}
