//go:build !linux

package receipt

import (
	"errors"
	"os"
	"path/filepath"
)

// syncDir makes the named files written in the directory d durable: without
// syncfs(2), an fsync of each and then of the directory.
func syncDir(d *os.File, names []string) error {
	var errs []error
	for _, n := range names {
		f, err := os.Open(filepath.Join(d.Name(), n))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, f.Sync(), f.Close())
	}
	errs = append(errs, d.Sync())
	return errors.Join(errs...)
}
