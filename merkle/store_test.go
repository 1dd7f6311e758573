package merkle

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestStoreBasics(t *testing.T) {
	for _, sk := range storeKinds {
		t.Run(sk.name, func(t *testing.T) {
			s := sk.open(t)
			// Enough hashes to cross memory chunks and file flushes.
			const n = 3*memChunk + 17
			hs := randomLeaves(10, n)
			for i, h := range hs {
				if err := s.Append(0, h); err != nil {
					t.Fatal(err)
				}
				if got, err := s.Get(0, uint64(i)); err != nil || got != h {
					t.Fatalf("Get right after Append(%d) = %s, %v", i, got, err)
				}
			}
			if s.Len(0) != n || s.Len(1) != 0 || s.Len(200) != 0 {
				t.Fatalf("Len = %d %d %d", s.Len(0), s.Len(1), s.Len(200))
			}
			for i, h := range hs {
				if got, err := s.Get(0, uint64(i)); err != nil || got != h {
					t.Fatalf("Get(0, %d) = %s, %v", i, got, err)
				}
			}
			if _, err := s.Get(0, n); !errors.Is(err, ErrIndexOutOfRange) {
				t.Errorf("Get past the end: %v", err)
			}
			if _, err := s.Get(5, 0); !errors.Is(err, ErrIndexOutOfRange) {
				t.Errorf("Get of empty level: %v", err)
			}
			if _, err := s.Get(200, 0); !errors.Is(err, ErrIndexOutOfRange) {
				t.Errorf("Get of level 200: %v", err)
			}
			if err := s.Append(MaxLevel+1, Hash{}); !errors.Is(err, ErrIndexOutOfRange) {
				t.Errorf("Append to level 64: %v", err)
			}
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(0, 0); !errors.Is(err, ErrClosed) {
				t.Errorf("Get after Close: %v", err)
			}
			if err := s.Append(0, Hash{}); !errors.Is(err, ErrClosed) {
				t.Errorf("Append after Close: %v", err)
			}
		})
	}
}

func TestFileStoreReopen(t *testing.T) {
	dir := t.TempDir()
	leaves := randomLeaves(11, 1000)
	ref := buildTree(t, NewMemoryStore(), leaves)
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	buildTree(t, s, leaves[:700])
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Level files hold exactly the complete subtrees.
	for l, want := range map[uint8]int64{0: 700, 1: 350, 2: 175, 3: 87, 9: 1, 10: 0} {
		st, err := os.Stat(filepath.Join(dir, LevelFileName(l)))
		if want == 0 {
			if !errors.Is(err, os.ErrNotExist) {
				t.Errorf("level %d file exists: %v", l, err)
			}
			continue
		}
		if err != nil || st.Size() != want*HashSize {
			t.Errorf("level %d file: %v, size %d, want %d", l, err, st.Size(), want*HashSize)
		}
	}
	s, err = OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tr, err := NewTree(s)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Size() != 700 {
		t.Fatalf("reopened size %d", tr.Size())
	}
	for _, size := range []uint64{0, 1, 255, 256, 512, 699, 700} {
		got, _ := tr.RootAt(size)
		want, _ := ref.RootAt(size)
		if got != want {
			t.Errorf("reopened RootAt(%d) = %s, want %s", size, got, want)
		}
	}
	for _, h := range leaves[700:] {
		tr.Append(h)
	}
	if tr.Root() != ref.Root() {
		t.Fatal("root after appending to a reopened store differs")
	}
}

func TestFileStoreLocked(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFileStore(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	s.Close()
	s, err = OpenFileStore(dir)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	s.Close()
}

// TestFileStoreRepair simulates what a crash can leave in the level files
// and checks that reopening gives a consistent store with correct roots.
func TestFileStoreRepair(t *testing.T) {
	leaves := randomLeaves(12, 500)
	ref := buildTree(t, NewMemoryStore(), leaves)
	build := func(t *testing.T) string {
		dir := t.TempDir()
		s, err := OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		buildTree(t, s, leaves)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	level := func(dir string, l uint8) string { return filepath.Join(dir, LevelFileName(l)) }
	appendBytes := func(t *testing.T, path string, b []byte) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(b)
		f.Close()
	}
	check := func(t *testing.T, dir string, wantSize uint64) {
		t.Helper()
		s, err := OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for l := uint8(0); l < MaxLevel; l++ {
			if s.Len(l+1) != s.Len(l)/2 {
				t.Fatalf("after repair level %d has %d hashes, level %d has %d", l+1, s.Len(l+1), l, s.Len(l))
			}
		}
		for l := uint8(0); l <= MaxLevel; l++ {
			st, err := os.Stat(level(dir, l))
			if err == nil && st.Size() != int64(s.Len(l))*HashSize {
				t.Fatalf("level %d file has %d bytes for %d hashes", l, st.Size(), s.Len(l))
			}
		}
		tr, err := NewTree(s)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ref.RootAt(wantSize)
		if tr.Size() != wantSize || tr.Root() != want {
			t.Fatalf("repaired tree: size %d root %s, want %d %s", tr.Size(), tr.Root(), wantSize, want)
		}
		// Appending the rest gives the full tree.
		for _, h := range leaves[wantSize:] {
			if _, err := tr.Append(h); err != nil {
				t.Fatal(err)
			}
		}
		if tr.Root() != ref.Root() {
			t.Fatal("root after completing the repaired tree differs")
		}
	}

	t.Run("torn trailing records", func(t *testing.T) {
		dir := build(t)
		appendBytes(t, level(dir, 0), []byte("0123456789"))
		appendBytes(t, level(dir, 3), make([]byte, 31))
		check(t, dir, 500)
	})
	t.Run("lost leaves", func(t *testing.T) {
		// Level 0 lost its last 37 hashes and half a record; the upper
		// levels, synced separately, still have hashes of the lost leaves.
		dir := build(t)
		if err := os.Truncate(level(dir, 0), 463*HashSize+16); err != nil {
			t.Fatal(err)
		}
		check(t, dir, 463)
	})
	t.Run("lost upper levels", func(t *testing.T) {
		dir := build(t)
		os.Remove(level(dir, 1))
		os.Truncate(level(dir, 4), 3*HashSize+5)
		check(t, dir, 500)
	})
	t.Run("only leaves", func(t *testing.T) {
		dir := build(t)
		for l := uint8(1); l <= MaxLevel; l++ {
			os.Remove(level(dir, l))
		}
		check(t, dir, 500)
	})
}
