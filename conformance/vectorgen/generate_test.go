package vectorgen

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestVectorsUpToDate regenerates the vectors and requires the committed copy to be
// byte-for-byte the same: the generator is deterministic, and the published vectors
// are what this code produces.
func TestVectorsUpToDate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "v")
	if err := GenerateVectors(dir); err != nil {
		t.Fatal(err)
	}
	var diffs []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		want, _ := os.ReadFile(path)
		got, err := os.ReadFile(filepath.Join("..", "vectors", rel))
		if err != nil || !bytes.Equal(got, want) {
			diffs = append(diffs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) > 0 {
		t.Fatalf("committed vectors differ from the generator's output in %v; run `go tool task vectors` and review the change", diffs)
	}
}
