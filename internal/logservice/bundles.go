package logservice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/projections"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
)

// A hosted tenant's C2SP entry bundles (/t/<tenant>/tile/entries/<N>[.p/<W>]) are
// read on demand from the log of record, SVC_LEAVES, with the broker's message-get
// API: no consumer is created (issue 26: consumers must not grow with tenants), and
// nothing is kept per tenant but a bounded cache of full bundles shared by the
// process. The batch holding leaf 256N is found by a binary search over the stream
// sequences (each probe asks for the tenant's first batch at or after a sequence,
// which the broker answers from its subject index), then the following batches are
// read one by one until the bundle's leaves are all in hand. So the sequencer that
// holds the tenant and a standby serving it from a read-only tree serve the same
// bytes, and a restart loses nothing. The encoding is the one file mode's
// projections.Entries writes: a big-endian uint16 length and the leaf, each leaf.

// bundleTimeout bounds the broker reads behind one bundle.
const bundleTimeout = 10 * time.Second

// bundleCacheBytes bounds the process's cache of full bundles.
const bundleCacheBytes = 64 << 20

// hostedBundles serves one hosted tenant's entry bundles (logserver.EntryBundles).
type hostedBundles struct {
	tenant string
	size   func() uint64 // the tenant's committed size, from its tree
	stream func(ctx context.Context) (jetstream.Stream, error)
	cache  *bundleCache
}

// Bundle returns the body of bundle index with width entries; a bundle beyond the
// committed size, or holding a leaf with no entry in C2SP form, is an error wrapping
// projections.ErrNoEntry (404).
func (b *hostedBundles) Bundle(index uint64, width int) ([]byte, error) {
	if width < 1 || width > merkle.TileWidth {
		return nil, fmt.Errorf("%w: width %d outside 1..%d", projections.ErrNoEntry, width, merkle.TileWidth)
	}
	first := index * merkle.TileWidth
	end := first + uint64(width)
	if size := b.size(); end > size {
		return nil, fmt.Errorf("%w: entries %d..%d are not all committed yet (%d leaves so far)", projections.ErrNoEntry, first, end-1, size)
	}
	key := bundleKey{b.tenant, index}
	if body, ok := b.cache.get(key); ok {
		return projections.BundlePrefix(body, width), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), bundleTimeout)
	defer cancel()
	stream, err := b.stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("entry bundle %d of %s: %w", index, b.tenant, err)
	}
	leaves, err := readCommitted(ctx, stream, b.tenant, first, end)
	if err != nil {
		return nil, err
	}
	body, err := encodeEntries(first, leaves)
	if err != nil {
		return nil, err
	}
	if width == merkle.TileWidth {
		b.cache.put(key, body)
	}
	return body, nil
}

// encodeEntries writes leaves (the first at index first) in the C2SP bundle form.
func encodeEntries(first uint64, leaves []pipeline.Leaf) ([]byte, error) {
	var body []byte
	for i, l := range leaves {
		if l.Data == nil || len(l.Data) > 0xffff {
			return nil, projections.NoEntryError(first + uint64(i))
		}
		body = projections.AppendBundleEntry(body, l.Data)
	}
	return body, nil
}

// errLogOfRecord says the stream does not hold leaves the tree committed.
var errLogOfRecord = errors.New("the log of record does not hold them")

// readCommitted returns tenant's committed leaves [first, end) from stream.
func readCommitted(ctx context.Context, stream jetstream.Stream, tenant string, first, end uint64) ([]pipeline.Leaf, error) {
	subject := pipeline.LeavesSubject(tenant)
	fail := func(err error) ([]pipeline.Leaf, error) {
		return nil, fmt.Errorf("entries %d..%d of %s: %w", first, end-1, tenant, err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return fail(err)
	}
	seq, batch, err := findBatch(ctx, stream, subject, first, last.Sequence)
	if err != nil {
		return fail(err)
	}
	out := make([]pipeline.Leaf, 0, end-first)
	for {
		next := first + uint64(len(out))
		if batch.First > next {
			return fail(fmt.Errorf("%w: the batch after leaf %d starts at %d", errLogOfRecord, next, batch.First))
		}
		for i, l := range batch.Leaves {
			if at := batch.First + uint64(i); at >= next && at < end {
				out = append(out, l)
			}
		}
		if uint64(len(out)) == end-first {
			return out, nil
		}
		if seq >= last.Sequence {
			return fail(fmt.Errorf("%w: the stream ends at leaf %d", errLogOfRecord, first+uint64(len(out))))
		}
		if seq, batch, err = batchAt(ctx, stream, subject, seq+1); err != nil {
			return fail(err)
		}
	}
}

// findBatch finds the batch holding leaf among subject's batches at stream sequences
// up to hi (the last): batches follow one another in stream order, so the first
// leaves of the batches rise with the sequence.
func findBatch(ctx context.Context, stream jetstream.Stream, subject string, leaf, hi uint64) (uint64, *pipeline.Batch, error) {
	lo := uint64(1)
	for lo <= hi {
		mid := lo + (hi-lo)/2
		seq, b, err := batchAt(ctx, stream, subject, mid)
		if err != nil {
			return 0, nil, err
		}
		switch {
		case leaf < b.First:
			hi = mid - 1 // the subject's first batch at or after mid starts later
		case leaf >= b.First+uint64(len(b.Leaves)):
			lo = seq + 1
		default:
			return seq, b, nil
		}
	}
	return 0, nil, fmt.Errorf("%w: no batch holds leaf %d", errLogOfRecord, leaf)
}

// batchAt reads subject's first batch at or after stream sequence from.
func batchAt(ctx context.Context, stream jetstream.Stream, subject string, from uint64) (uint64, *pipeline.Batch, error) {
	m, err := stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(subject))
	if err != nil {
		return 0, nil, fmt.Errorf("reading %s at %d: %w", subject, from, err)
	}
	b, err := pipeline.DecodeBatch(m.Data)
	if err != nil {
		return 0, nil, fmt.Errorf("batch at stream sequence %d of %s: %w", m.Sequence, subject, err)
	}
	return m.Sequence, b, nil
}

// bundleKey names a full bundle of a tenant.
type bundleKey struct {
	tenant string
	index  uint64
}

// bundleCache keeps full bundles (which never change) up to a byte budget, dropping
// the least recently used.
type bundleCache struct {
	mu    sync.Mutex
	max   int
	bytes int
	tick  uint64
	items map[bundleKey]*bundleItem
}

type bundleItem struct {
	body []byte
	used uint64
}

func newBundleCache(max int) *bundleCache {
	return &bundleCache{max: max, items: map[bundleKey]*bundleItem{}}
}

func (c *bundleCache) get(k bundleKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.items[k]
	if !ok {
		return nil, false
	}
	c.tick++
	it.used = c.tick
	return it.body, true
}

func (c *bundleCache) put(k bundleKey, body []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[k]; ok || len(body) > c.max {
		return
	}
	for c.bytes+len(body) > c.max {
		var oldest bundleKey
		var at uint64 = ^uint64(0)
		for key, it := range c.items {
			if it.used < at {
				oldest, at = key, it.used
			}
		}
		c.bytes -= len(c.items[oldest].body)
		delete(c.items, oldest)
	}
	c.tick++
	c.items[k] = &bundleItem{body: body, used: c.tick}
	c.bytes += len(body)
}

// bundleSource is the process's share of the hosted entry bundles: the cache and the
// SVC_LEAVES handle. Its zero value is ready.
type bundleSource struct {
	mu     sync.Mutex
	cache  *bundleCache
	handle jetstream.Stream
}

// of returns the entry bundles of tenant, whose committed leaves tree holds.
func (s *bundleSource) of(js jetstream.JetStream, tenant string, tree *merkle.Tree) *hostedBundles {
	s.mu.Lock()
	if s.cache == nil {
		s.cache = newBundleCache(bundleCacheBytes)
	}
	s.mu.Unlock()
	return &hostedBundles{tenant: tenant, size: tree.Size, cache: s.cache, stream: func(ctx context.Context) (jetstream.Stream, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.handle == nil {
			h, err := js.Stream(ctx, pipeline.LeavesStream)
			if err != nil {
				return nil, err
			}
			s.handle = h
		}
		return s.handle, nil
	}}
}
