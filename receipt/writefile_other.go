//go:build !linux

package receipt

import "os"

// writeLinked is the O_TMPFILE path of writeFileNoSync, which only Linux has: it
// reports false and the caller writes through a temporary file and a rename.
func writeLinked(int, string, string, []byte, os.FileMode) (bool, error) { return false, nil }

// cwdFD stands for the working directory, which writeLinked never uses here.
const cwdFD = -100
