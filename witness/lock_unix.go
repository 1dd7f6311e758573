//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package witness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive advisory lock on <dir>/.witness.lock without waiting, so
// two witness processes never share an output directory. The lock goes with the
// returned file.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, ".witness.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another witness is using %s (%s is locked)", dir, path)
		}
		return nil, err
	}
	return f, nil
}
