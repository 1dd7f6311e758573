package conformance

import (
	"fmt"

	"svc.dev/svc/merkle"
)

// FileCopy is a read-only copy of a SPEC.md log file held in memory. Opening it never
// writes to the file (unlike merkle.OpenLogFile, which repairs a torn tail).
type FileCopy struct {
	path string
	tree *merkle.Tree
}

// OpenFileCopy reads a log file into a memory tree.
func OpenFileCopy(path string) (*FileCopy, error) {
	tree, err := merkle.NewTree(merkle.NewMemoryStore())
	if err != nil {
		return nil, err
	}
	// Streamed: only the leaf hashes are kept (a month of receipts is gigabytes).
	err = merkle.ScanLogPath(path, "log file "+path, func(e merkle.Entry) error {
		_, err := tree.Append(e.Hash)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &FileCopy{path: path, tree: tree}, nil
}

// Size is the number of leaves in the file.
func (c *FileCopy) Size() (uint64, error) { return c.tree.Size(), nil }

// RootAt is the root of the first size leaves.
func (c *FileCopy) RootAt(size uint64) (merkle.Hash, error) { return c.tree.RootAt(size) }

// Consistency proves the file's tree at newSize extends the one at oldSize.
func (c *FileCopy) Consistency(oldSize, newSize uint64) ([]merkle.Hash, error) {
	if newSize > c.tree.Size() {
		return nil, fmt.Errorf("log file holds %d leaves; size %d was asked", c.tree.Size(), newSize)
	}
	return c.tree.ConsistencyProof(oldSize, newSize)
}

// Describe names the copy.
func (c *FileCopy) Describe() string { return "log file " + c.path }
