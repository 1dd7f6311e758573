package receipt

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// writeLinked writes data to an unnamed file in path's directory (O_TMPFILE) and
// links it as path, so a reader sees the whole file or none. Creating a bundle file
// is a good part of a receipt's kernel time; this makes one directory entry instead of
// a temporary one, a rename and a removal. It reports false, having changed nothing,
// when it cannot be used (a file system without O_TMPFILE, no /proc, path exists
// already): the caller then writes through a temporary file and a rename.
func writeLinked(path string, data []byte, perm os.FileMode) (bool, error) {
	fd, err := unix.Open(filepath.Dir(path), unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return false, nil
	}
	defer unix.Close(fd)
	if err := writeAllFD(fd, data); err != nil {
		return true, fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil { // as os.WriteFile, without the umask
		return true, fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW); err != nil {
		return false, nil // EEXIST: a rename replaces it; anything else: the rename path reports it
	}
	return true, nil
}

func writeAllFD(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}
