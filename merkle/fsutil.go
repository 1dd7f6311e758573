package merkle

import (
	"os"
	"runtime"
)

// syncDir fsyncs a directory, making the creation, removal or renaming of
// its entries durable. Windows cannot fsync a directory and needs not.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
