//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package witness

import (
	"os"
	"path/filepath"
)

// lockDir opens <dir>/.witness.lock; there is no advisory lock on this platform.
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, ".witness.lock"), os.O_RDWR|os.O_CREATE, 0o644)
}
