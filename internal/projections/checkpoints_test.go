package projections

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// testCheckpointer is a loaded checkpointer of tenant acme (log acme-prod) over a
// fresh memory tree, writing into dir, due every minute with an hourly heartbeat, its
// clock reading *now; it returns the tree and the signing key too.
func testCheckpointer(t *testing.T, dir string, now *time.Time) (*Checkpointer, *merkle.Tree, *signer.Key) {
	t.Helper()
	key, _ := signer.GenerateKey()
	tree, _ := merkle.NewTree(merkle.NewMemoryStore())
	c := &Checkpointer{Dir: dir, Tenant: "acme", LogID: "acme-prod", Tree: tree, Signer: receipt.KeySigner{Key: key},
		Every: time.Minute, Heartbeat: time.Hour, Now: func() time.Time { return *now }}
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	return c, tree, key
}

func TestCheckpointerGrowthAndHeartbeat(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	c, tree, key := testCheckpointer(t, dir, &now)
	ctx := context.Background()
	tick := func() {
		t.Helper()
		if err := c.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tick() // an empty log publishes nothing
	if len(c.Since(0)) != 0 {
		t.Fatal("checkpoint of an empty log")
	}
	tree.Append(merkle.LeafHash([]byte("a")))
	tree.Append(merkle.LeafHash([]byte("b")))
	tick()
	cps := c.Since(0)
	if len(cps) != 1 || cps[0].TreeSize != 2 || cps[0].LogID != "acme-prod" {
		t.Fatalf("after growth: %+v", cps)
	}
	if _, err := cps[0].Envelope.Verify([]signer.PublicKey{key.Public()}); err != nil {
		t.Fatal(err)
	}
	first := cps[0].SignedAt
	now = now.Add(30 * time.Minute)
	tick() // unchanged, heartbeat not due
	if c.Since(0)[0].SignedAt != first {
		t.Fatal("an unchanged head was re-signed before the heartbeat")
	}
	now = now.Add(31 * time.Minute)
	tick() // heartbeat due
	cps = c.Since(0)
	if len(cps) != 1 || cps[0].SignedAt == first || cps[0].TreeSize != 2 {
		t.Fatalf("heartbeat: %+v", cps)
	}
	// The file form on disk: <size>.json and latest.json, the same checkpoint.
	for _, name := range []string{"2.json", "latest.json"} {
		data, err := os.ReadFile(filepath.Join(dir, "acme", name))
		if err != nil {
			t.Fatal(err)
		}
		var f client.CheckpointFile
		if err := json.Unmarshal(data, &f); err != nil || f.Tenant != "acme" || f.TreeSize != 2 || f.SignedAt != cps[0].SignedAt || f.RootHash != tree.Root().String() {
			t.Fatalf("%s: %v %+v", name, err, f)
		}
	}
	tree.Append(merkle.LeafHash([]byte("c")))
	tick()
	if cps = c.Since(2); len(cps) != 1 || cps[0].TreeSize != 3 {
		t.Fatalf("since=2: %+v", cps)
	}
	// A reload sees what was published.
	c2 := &Checkpointer{Dir: dir, Tenant: "acme", Tree: tree, Signer: receipt.KeySigner{Key: key}}
	if err := c2.Load(); err != nil || len(c2.Since(0)) != 2 {
		t.Fatalf("reload: %v %d", err, len(c2.Since(0)))
	}
	// A tree whose root at a published size differs is never re-signed.
	other, _ := merkle.NewTree(merkle.NewMemoryStore())
	for _, l := range []string{"x", "y", "z"} {
		other.Append(merkle.LeafHash([]byte(l)))
	}
	c3 := &Checkpointer{Dir: dir, Tenant: "acme", Tree: other, Signer: receipt.KeySigner{Key: key}, Heartbeat: time.Nanosecond}
	c3.Load()
	if err := c3.Tick(ctx); err == nil || !strings.Contains(err.Error(), "refusing to re-sign") {
		t.Fatalf("a different root at a published size: %v", err)
	}
}

func TestMeteringIsIdempotent(t *testing.T) {
	m := &Metering{StatePath: filepath.Join(t.TempDir(), "m.json")}
	if err := m.Load(); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC)
	b := &pipeline.Batch{First: 0, Leaves: make([]pipeline.Leaf, 3)}
	m.Apply(Event{Seq: 1, Tenant: "acme", Time: at, Batch: b})
	m.Apply(Event{Seq: 1, Tenant: "acme", Time: at, Batch: b}) // replayed: ignored
	m.Apply(Event{Seq: 2, Tenant: "acme", Time: at.Add(2 * time.Minute), Batch: &pipeline.Batch{First: 3, Leaves: make([]pipeline.Leaf, 2)}})
	if n, total := m.Appends("acme", "2026-11"); n != 3 || total != 5 {
		t.Fatalf("November: %d appends, %d leaves", n, total)
	}
	if n, _ := m.Appends("acme", "2026-12"); n != 2 {
		t.Fatalf("December: %d appends", n)
	}
	if err := m.save(); err != nil {
		t.Fatal(err)
	}
	m2 := &Metering{StatePath: m.StatePath}
	if err := m2.Load(); err != nil || m2.Position() != 2 {
		t.Fatalf("reload: %v position %d", err, m2.Position())
	}
}
