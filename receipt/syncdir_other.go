//go:build !linux

package receipt

import (
	"errors"
	"os"
	"path/filepath"
)

// syncDir makes the named files written in dir durable: without syncfs(2), an fsync
// of each and then of the directory.
func syncDir(dir string, names []string) error {
	var errs []error
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, f.Sync(), f.Close())
	}
	d, err := os.Open(dir)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	errs = append(errs, d.Sync(), d.Close())
	return errors.Join(errs...)
}
