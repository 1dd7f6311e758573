package receipt

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// cwdFD makes writeLinked's names relative to the working directory.
const cwdFD = unix.AT_FDCWD

// writeLinked writes data to an unnamed file in the directory dir (O_TMPFILE) and
// links it as name, so a reader sees the whole file or none. dir and name are relative
// to dirfd, which is an open directory or unix.AT_FDCWD. Creating a bundle file is a
// good part of a receipt's kernel time; this makes one directory entry instead of a
// temporary one, a rename and a removal, and with a directory kept open it walks no
// path. It reports false, having changed nothing, when it cannot be used (a file
// system without O_TMPFILE, name exists already): the caller then writes through a
// temporary file and a rename.
func writeLinked(dirfd int, dir, name string, data []byte, perm os.FileMode) (bool, error) {
	fd, err := unix.Openat(dirfd, dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return false, nil
	}
	defer unix.Close(fd)
	if err := writeAllFD(fd, data); err != nil {
		return true, fmt.Errorf("write %s: %w", filepath.Base(name), err)
	}
	if umaskHides(perm) { // as os.WriteFile, without the umask
		if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil {
			return true, fmt.Errorf("write %s: %w", filepath.Base(name), err)
		}
	}
	if err := linkUnnamed(fd, dirfd, name); err != nil {
		return false, nil // EEXIST: a rename replaces it; anything else: the rename path reports it
	}
	return true, nil
}

// linkUnnamed gives the O_TMPFILE file fd the name name (relative to dirfd).
// linkat(AT_EMPTY_PATH) links the descriptor itself; before Linux 6.10 it needs
// CAP_DAC_READ_SEARCH, and the file's /proc/self/fd link, which costs a procfs
// lookup, serves instead.
func linkUnnamed(fd, dirfd int, name string) error {
	err := unix.Linkat(fd, "", dirfd, name, unix.AT_EMPTY_PATH)
	if err == nil || err == unix.EEXIST {
		return err
	}
	return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirfd, name, unix.AT_SYMLINK_FOLLOW)
}

// umaskHides reports whether the process's umask clears bits of perm, so that a file
// created with perm needs a chmod to get them. svc never changes its umask, so it is
// read once (from /proc/self/status: reading it through umask(2) would change it for
// a moment); where it cannot be read, every file gets the chmod.
func umaskHides(perm os.FileMode) bool {
	return uint32(perm.Perm())&processUmask() != 0
}

var processUmask = sync.OnceValue(func() uint32 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0o777
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err != nil {
				return 0o777
			}
			return uint32(m)
		}
	}
	return 0o777
})

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
