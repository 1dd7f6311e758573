//go:build !linux

package merkle

import "os"

// dataSync makes f's data durable: fsync, where fdatasync is not available.
func dataSync(f *os.File) error { return f.Sync() }
