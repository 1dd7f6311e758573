package merkle

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// TestTileHashesAndEdges: at every size around flush boundaries, every hash a file
// store serves (from its file, its edge tile or its buffer), and every tile, equals
// the memory store's; tiles beyond the tree do not exist yet. A reopened store serves
// the same.
func TestTileHashesAndEdges(t *testing.T) {
	dir := t.TempDir()
	fs, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ft, _ := NewTree(fs)
	mt, _ := NewTree(NewMemoryStore())
	check := func(ft *Tree) {
		t.Helper()
		n := ft.Size()
		for l := uint8(0); l <= 12; l++ {
			for i := uint64(0); i < n>>l; i++ {
				a, err1 := ft.store.Get(l, i)
				b, err2 := mt.store.Get(l, i)
				if err1 != nil || err2 != nil || a != b {
					t.Fatalf("size %d: hash %d of level %d: %v %v %x %x", n, i, l, err1, err2, a, b)
				}
			}
		}
		for tl := uint8(0); tl <= 1; tl++ {
			have := n >> (tl * TileHeight)
			for idx := uint64(0); idx*TileWidth <= have; idx++ {
				w := int(min(have-idx*TileWidth, TileWidth))
				if w == 0 {
					continue
				}
				a, err1 := ft.TileHashes(tl, idx, w)
				b, err2 := mt.TileHashes(tl, idx, w)
				if err1 != nil || err2 != nil || !bytes.Equal(a, b) || len(a) != w*HashSize {
					t.Fatalf("size %d: tile %d/%d.p/%d: %v %v", n, tl, idx, w, err1, err2)
				}
				if _, err := ft.TileHashes(tl, idx, w+1); w < TileWidth && !errors.Is(err, ErrIndexOutOfRange) {
					t.Fatalf("size %d: tile %d/%d one hash wider than the tree: %v", n, tl, idx, err)
				}
			}
		}
	}
	for i := 0; i < 3*TileWidth*TileWidth/4+7; i++ {
		h := LeafHash([]byte(fmt.Sprint(i)))
		ft.Append(h)
		mt.Append(h)
		if n := ft.Size(); n%97 == 0 || n%TileWidth < 2 || n%TileWidth > TileWidth-2 {
			if n < 2000 || n%4099 == 0 {
				check(ft)
			}
		}
	}
	check(ft)
	fs.Sync()
	check(ft)
	fs.Close()
	fs, err = OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	ft, _ = NewTree(fs)
	check(ft)
	if _, err := ft.TileHashes(MaxTileLevel+1, 0, 1); !errors.Is(err, ErrIndexOutOfRange) {
		t.Fatalf("tile level %d: %v", MaxTileLevel+1, err)
	}
}
