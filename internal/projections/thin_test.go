package projections

import (
	"context"
	"encoding/json"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
)

// TestThinCheckpointsRule: of a long history the KeepRecent newest are kept, and of
// the older ones exactly the smallest of each power-of-two range; what is kept once
// past the recent window stays kept.
func TestThinCheckpointsRule(t *testing.T) {
	if d := ThinCheckpoints([]uint64{1, 2, 3}); d != nil {
		t.Fatalf("a short history thinned: %v", d)
	}
	var held []uint64
	keptOld := map[uint64]bool{}
	for size := uint64(3); size < 5000; size += 7 {
		held = append(held, size)
		drop := ThinCheckpoints(held)
		for _, n := range drop {
			if keptOld[n] {
				t.Fatalf("size %d, kept earlier past the recent window, dropped at %d", n, size)
			}
		}
		held = slices.DeleteFunc(held, func(n uint64) bool { return slices.Contains(drop, n) })
		if len(held) > KeepRecent {
			for _, n := range held[:len(held)-KeepRecent] {
				keptOld[n] = true
			}
		}
	}
	if held[len(held)-1] != 4999-(4999-3)%7 {
		t.Fatalf("the latest checkpoint was dropped: %v", held[len(held)-KeepRecent:])
	}
	old := held[:len(held)-KeepRecent]
	ranges := map[int]bool{}
	for i, n := range old {
		k := bits.Len64(n)
		if ranges[k] {
			t.Fatalf("two old checkpoints in range 2^%d: %v", k-1, old)
		}
		ranges[k] = true
		if i > 0 && n < old[i-1] {
			t.Fatalf("out of order: %v", old)
		}
	}
	if len(old) < 10 || len(held) > KeepRecent+64 {
		t.Fatalf("%d kept (%d old): %v", len(held), len(old), old)
	}
}

// TestCheckpointerThinsFilesAndMemory: a checkpointer that published 200 checkpoints
// holds, in its directory, its list and after a restart, only what the rule keeps;
// latest.json is the newest.
func TestCheckpointerThinsFilesAndMemory(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	c, tree, key := testCheckpointer(t, dir, &now)
	var all []uint64
	for i := range 200 {
		tree.Append(merkle.LeafHash([]byte(strconv.Itoa(i))))
		now = now.Add(time.Minute)
		if err := c.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		all = append(all, tree.Size())
	}
	want := slices.DeleteFunc(slices.Clone(all), func(n uint64) bool { return slices.Contains(ThinCheckpoints(all), n) })
	check := func(c *Checkpointer, when string) {
		t.Helper()
		var mem []uint64
		for _, cp := range c.Since(0) {
			mem = append(mem, cp.TreeSize)
		}
		if !slices.Equal(mem, want) {
			t.Fatalf("%s: in memory %v, want %v", when, mem, want)
		}
		if got := fileSizes(t, filepath.Join(dir, "acme")); !slices.Equal(got, want) {
			t.Fatalf("%s: files %v, want %v", when, got, want)
		}
	}
	// 137…200 are the recent ones; 1…136 keep 1, 2, 4 … 128, one per range.
	if len(want) != KeepRecent+8 || want[7] != 128 || want[8] != 137 {
		t.Fatalf("kept %d of 200: %v", len(want), want)
	}
	check(c, "after publishing")
	latest, err := os.ReadFile(filepath.Join(dir, "acme", "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cp client.CheckpointFile
	if err := json.Unmarshal(latest, &cp); err != nil || cp.TreeSize != 200 {
		t.Fatalf("latest.json: size %d, %v", cp.TreeSize, err)
	}
	again := &Checkpointer{Dir: dir, Tenant: "acme", LogID: "acme-prod", Tree: tree, Signer: receipt.KeySigner{Key: key}}
	if err := again.Load(); err != nil {
		t.Fatal(err)
	}
	check(again, "after a restart")
}

// fileSizes lists the <size>.json files of dir, ascending.
func fileSizes(t *testing.T, dir string) []uint64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			if v, err := strconv.ParseUint(n, 10, 64); err == nil {
				out = append(out, v)
			}
		}
	}
	slices.Sort(out)
	return out
}
