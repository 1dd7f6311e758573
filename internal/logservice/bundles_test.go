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
	js := bundleBroker(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	leaf := func(tenant string, i uint64) []byte {
		return fmt.Appendf(nil, "%s leaf %d %s", tenant, i, make([]byte, i%7))
	}
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

// bundleBroker is an embedded broker with the pipeline's streams.
func bundleBroker(t testing.TB) jetstream.JetStream {
	t.Helper()
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
	if err := pipeline.EnsureStreams(context.Background(), js, pipeline.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	return js
}

// BenchmarkBundleFromTheLogOfRecord: one uncached bundle (a partial one, which is
// never cached) of a tenant with 4,096 batches of 64 leaves interleaved with another
// tenant's, read from the broker: the binary search and the batches read after it.
func BenchmarkBundleFromTheLogOfRecord(b *testing.B) {
	js := bundleBroker(b)
	const batches, per = 4096, 64
	for i := range uint64(batches) {
		for _, tenant := range []string{"a", "other"} {
			bt := &pipeline.Batch{First: i * per}
			for j := range uint64(per) {
				bt.Leaves = append(bt.Leaves, pipeline.NewLeaf(fmt.Appendf(nil, "leaf %d of %s, about a receipt's size %0200d", i*per+j, tenant, 0)))
			}
			if _, err := js.PublishAsync(pipeline.LeavesSubject(tenant), bt.Encode()); err != nil {
				b.Fatal(err)
			}
		}
	}
	<-js.PublishAsyncComplete()
	tree, _ := merkle.NewTree(merkle.NewMemoryStore())
	if _, err := tree.AppendBatch(make([]merkle.Hash, batches*per)); err != nil {
		b.Fatal(err)
	}
	var src bundleSource
	bundles := src.of(js, "a", tree)
	rng := rand.New(rand.NewPCG(3, 4))
	b.Run("bundle", func(b *testing.B) {
		for range b.N {
			if _, err := bundles.Bundle(uint64(rng.IntN(batches*per/256)), 255); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The floor: one get of one of the tenant's batches, a single broker round trip.
	b.Run("one-get", func(b *testing.B) {
		stream, err := js.Stream(context.Background(), pipeline.LeavesStream)
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			if _, _, err := batchAt(context.Background(), stream, pipeline.LeavesSubject("a"), uint64(1+rng.IntN(2*batches))); err != nil {
				b.Fatal(err)
			}
		}
	})
}
