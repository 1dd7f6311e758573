package sequencer

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// TestRestartWithLargeLog: a restart reads the persisted tree store plus the stream
// tail, never the whole log. Restart times are logged; the assertions are on how much
// was replayed.
func TestRestartWithLargeLog(t *testing.T) {
	const n = 300_000
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	dir := t.TempDir()
	leaves := make([]pipeline.Leaf, n)
	for i := range leaves {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(i))
		leaves[i] = pipeline.Leaf{Hash: merkle.LeafHash(b[:])}
	}
	start := func(adopt []pipeline.Leaf) (*Sequencer, time.Duration, func()) {
		s, err := New(Config{Tenant: "big", Conn: nc, Dir: dir, Signer: signerFor(key), Adopt: adopt})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t0 := time.Now()
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		select {
		case <-s.Ready():
		case err := <-done:
			t.Fatal(err)
		}
		return s, time.Since(t0), func() { cancel(); <-done }
	}
	t0 := time.Now()
	a, _, stopA := start(leaves)
	root := a.Tree().Root()
	t.Logf("built a log of %d leaves in %s", n, time.Since(t0).Round(time.Millisecond))
	stopA()
	a.Close() // clean stop: the store is synced and the position recorded

	b, took, stopB := start(nil)
	if b.Replayed() != 0 || b.Tree().Size() != n || b.Tree().Root() != root {
		t.Fatalf("clean restart replayed %d leaves, size %d", b.Replayed(), b.Tree().Size())
	}
	t.Logf("restart after a clean stop: %s, %d leaves replayed", took.Round(time.Millisecond), b.Replayed())
	// Grow the log by 5,000 more, then stop without a checkpoint, as a crash would.
	c, _ := pipeline.NewClient(nc, pipeline.ClientConfig{})
	defer c.Close()
	for i := 0; i < 5000; i += 500 {
		errs := make(chan error, 500)
		for j := i; j < i+500; j++ {
			go func(j int) {
				_, err := c.Append(context.Background(), "big", pipeline.NewLeaf([]byte(fmt.Sprintf("after-restart-%d", j))))
				errs <- err
			}(j)
		}
		for j := 0; j < 500; j++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	stopB()
	b.store.Close()
	// As if the store had lost everything since the last checkpoint (the state file
	// still says n): cut its leaf level back to n and drop the upper levels, which the
	// store recomputes on open.
	treeDir := filepath.Join(dir, "tree")
	if err := os.Truncate(filepath.Join(treeDir, merkle.LevelFileName(0)), n*32); err != nil {
		t.Fatal(err)
	}
	for l := uint8(1); l <= merkle.MaxLevel; l++ {
		os.Remove(filepath.Join(treeDir, merkle.LevelFileName(l)))
	}
	d, took, stopD := start(nil)
	defer stopD()
	defer d.Close()
	if d.Tree().Size() != n+5000 {
		t.Fatalf("after the crash the log has %d leaves, want %d", d.Tree().Size(), n+5000)
	}
	if d.Replayed() != 5000 {
		t.Fatalf("restart after a crash replayed %d leaves; the 5000 the store lost were missing", d.Replayed())
	}
	t.Logf("restart after a crash: %s, %d leaves replayed", took.Round(time.Millisecond), d.Replayed())
}

func signerFor(k *signer.Key) receipt.EnvelopeSigner { return receipt.KeySigner{Key: k} }
