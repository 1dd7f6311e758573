package logservice

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
)

// TestBundlesFromTheLogOfRecord: entry bundles read from SVC_LEAVES on a real broker,
// where two tenants' batches of random sizes (1..300 leaves, some overlapping what
// was committed before) interleave: every full and partial bundle holds exactly the
// tenant's leaves in order; a bundle past the committed size, and one holding a leaf
// appended by hash only, answer an error wrapping fs.ErrNotExist that says why.
func TestBundlesFromTheLogOfRecord(t *testing.T) {
	srv, err := natsembed.Start(natsembed.Config{DataDir: t.TempDir(), Password: "pw", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := natsembed.Connect(srv, "bundles test", pipeline.Credentials{URL: natsembed.URL(srv, "pw")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := pipeline.EnsureStreams(ctx, js, pipeline.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	leaf := func(tenant string, i uint64) []byte { return fmt.Appendf(nil, "%s leaf %d %s", tenant, i, make([]byte, i%7)) }
	sizes := map[string]uint64{}
	for sizes["a"] < 1500 || sizes["b"] < 700 {
		tenant := []string{"a", "b"}[rng.IntN(2)]
		first := sizes[tenant]
		if first > 0 && rng.IntN(5) == 0 {
			first -= uint64(rng.IntN(int(min(first, 20)))) // a batch re-committing leaves already held
		}
		b := &pipeline.Batch{First: first}
		for i := range uint64(1 + rng.IntN(300)) {
			l := pipeline.NewLeaf(leaf(tenant, first+i))
			if tenant == "b" && first+i == 600 {
				l.Data = nil // appended by hash only
			}
			b.Leaves = append(b.Leaves, l)
		}
		if _, err := js.Publish(ctx, pipeline.LeavesSubject(tenant), b.Encode()); err != nil {
			t.Fatal(err)
		}
		sizes[tenant] = max(sizes[tenant], first+uint64(len(b.Leaves)))
	}
	var src bundleSource
	for _, tenant := range []string{"a", "b"} {
		tree, err := merkle.NewTree(merkle.NewMemoryStore())
		if err != nil {
			t.Fatal(err)
		}
		hashes := make([]merkle.Hash, sizes[tenant])
		if _, err := tree.AppendBatch(hashes); err != nil {
			t.Fatal(err)
		}
		bundles := src.of(js, tenant, tree)
		for n := uint64(0); n*256 < sizes[tenant]; n++ {
			for _, w := range []int{256, 1, 77, int(min(256, sizes[tenant]-n*256))} {
				first, end := n*256, n*256+uint64(w)
				body, err := bundles.Bundle(n, w)
				switch {
				case end > sizes[tenant] || (tenant == "b" && first <= 600 && 600 < end):
					if !errors.Is(err, fs.ErrNotExist) {
						t.Fatalf("%s bundle %d width %d: %v, want a 404", tenant, n, w, err)
					}
					continue
				case err != nil:
					t.Fatalf("%s bundle %d width %d: %v", tenant, n, w, err)
				}
				var want []byte
				for i := first; i < end; i++ {
					want = binary.BigEndian.AppendUint16(want, uint16(len(leaf(tenant, i))))
					want = append(want, leaf(tenant, i)...)
				}
				if string(body) != string(want) {
					t.Fatalf("%s bundle %d width %d holds other leaves than committed", tenant, n, w)
				}
			}
		}
	}
}
