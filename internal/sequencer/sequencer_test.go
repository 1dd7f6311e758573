package sequencer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// testBroker starts an embedded nats-server with the streams, in t.TempDir(), and
// connects to it.
func testBroker(t testing.TB) *nats.Conn {
	nc, _ := testkit.Broker(t)()
	return nc
}

type testSeq struct {
	*Sequencer
	key  *signer.Key
	done chan error
	stop context.CancelFunc
}

func startSequencer(t testing.TB, nc *nats.Conn, dir string, key *signer.Key) *testSeq {
	t.Helper()
	s, err := New(Config{Tenant: "acme", Conn: nc, Dir: dir, Signer: receipt.KeySigner{Key: key}, LogID: "acme-log"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testSeq{Sequencer: s, key: key, done: make(chan error, 1), stop: cancel}
	go func() {
		err := s.Run(ctx)
		if err != nil && !errors.Is(err, ErrFenced) {
			t.Errorf("sequencer: %v", err)
		}
		ts.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-ts.done
		s.Close()
	})
	return ts
}

func checkProof(t testing.TB, key *signer.Key, leaf []byte, p *receipt.Proof) *receipt.TreeHead {
	t.Helper()
	if _, err := p.TreeHead.Verify([]signer.PublicKey{key.Public()}); err != nil {
		t.Fatalf("head signature: %v", err)
	}
	th, err := receipt.DecodeTreeHead(p.TreeHead)
	if err != nil {
		t.Fatal(err)
	}
	if th.TreeSize != p.Inclusion.TreeSize || th.Log != "acme-log" {
		t.Fatalf("head %+v vs proof size %d", th, p.Inclusion.TreeSize)
	}
	root, _ := merkle.ParseHash(th.RootHash)
	hashes, err := receipt.ParseHashes(p.Inclusion.Hashes)
	if err != nil {
		t.Fatal(err)
	}
	if err := merkle.VerifyInclusion(p.Inclusion.LeafIndex, p.Inclusion.TreeSize, merkle.LeafHash(leaf), hashes, root); err != nil {
		t.Fatalf("leaf %d: %v", p.Inclusion.LeafIndex, err)
	}
	return th
}

// indices records which leaf each index went to, after checking its proof, and fails
// when an index is assigned twice.
type indices struct {
	mu sync.Mutex
	m  map[uint64]string
}

func (ix *indices) add(t testing.TB, key *signer.Key, leaf []byte, p *receipt.Proof) {
	checkProof(t, key, leaf, p)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.m == nil {
		ix.m = map[uint64]string{}
	}
	if prev, dup := ix.m[p.Inclusion.LeafIndex]; dup {
		t.Errorf("index %d assigned to %s and %s", p.Inclusion.LeafIndex, prev, leaf)
	}
	ix.m[p.Inclusion.LeafIndex] = string(leaf)
}

// concurrently runs fn(0) .. fn(n-1) each on its own goroutine and waits for all.
func concurrently(n int, fn func(p int)) {
	var wg sync.WaitGroup
	for p := 0; p < n; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			fn(p)
		}(p)
	}
	wg.Wait()
}

// append appends leaf for acme with do (a client's Do or Append) and records its
// index; it reports the failure with t.Error and returns false when the append fails.
func (ix *indices) append(t testing.TB, key *signer.Key, do func(context.Context, string, pipeline.Leaf) (*receipt.Proof, error), leaf []byte) bool {
	proof, err := do(context.Background(), "acme", pipeline.NewLeaf(leaf))
	if err != nil {
		t.Error(err)
		return false
	}
	ix.add(t, key, leaf, proof)
	return true
}

func TestConcurrentProducersOneSequence(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	seq := startSequencer(t, nc, t.TempDir(), key)
	const producers, each = 16, 150
	seen := &indices{}
	concurrently(producers, func(p int) {
		c, err := pipeline.NewClient(nc, pipeline.ClientConfig{Timeout: 5 * time.Second})
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		for i := 0; i < each; i++ {
			if !seen.append(t, key, c.Append, []byte(fmt.Sprintf(`{"producer":%d,"i":%d}`, p, i))) {
				return
			}
		}
	})
	if len(seen.m) != producers*each {
		t.Fatalf("%d distinct indices, want %d", len(seen.m), producers*each)
	}
	for i := uint64(0); i < producers*each; i++ {
		if _, ok := seen.m[i]; !ok {
			t.Fatalf("gap at index %d", i)
		}
	}
	if seq.Tree().Size() != producers*each {
		t.Fatalf("tree size %d", seq.Tree().Size())
	}
}

func TestRetryGetsExistingIndex(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	startSequencer(t, nc, t.TempDir(), key)
	c, _ := pipeline.NewClient(nc, pipeline.ClientConfig{})
	leaf := []byte(`{"receipt":"same"}`)
	p1, err := c.Append(context.Background(), "acme", pipeline.NewLeaf(leaf))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(context.Background(), "acme", pipeline.NewLeaf([]byte(`{"other":1}`))); err != nil {
		t.Fatal(err)
	}
	p2, err := c.Append(context.Background(), "acme", pipeline.NewLeaf(leaf))
	if err != nil {
		t.Fatal(err)
	}
	if p2.Inclusion.LeafIndex != p1.Inclusion.LeafIndex || p2.Inclusion.TreeSize != 2 {
		t.Fatalf("retry got index %d at size %d, want %d at size 2", p2.Inclusion.LeafIndex, p2.Inclusion.TreeSize, p1.Inclusion.LeafIndex)
	}
	checkProof(t, key, leaf, p2)
	// A hash-only append of the same leaf is the same leaf.
	h := pipeline.NewLeaf(leaf)
	h.Data = nil
	p3, err := c.Append(context.Background(), "acme", h)
	if err != nil || p3.Inclusion.LeafIndex != p1.Inclusion.LeafIndex {
		t.Fatalf("hash-only retry: %v %+v", err, p3)
	}
}

func TestRestartResumesFromStream(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	dir := t.TempDir()
	c, _ := pipeline.NewClient(nc, pipeline.ClientConfig{})
	s1 := startSequencer(t, nc, dir, key)
	var leaves [][]byte
	for i := 0; i < 50; i++ {
		leaves = append(leaves, []byte(fmt.Sprintf(`{"n":%d}`, i)))
		if _, err := c.Append(context.Background(), "acme", pipeline.NewLeaf(leaves[i])); err != nil {
			t.Fatal(err)
		}
	}
	root1 := s1.Tree().Root()
	s1.stop()
	<-s1.done
	s1.done <- nil // let the cleanup's receive return
	s1.Close()
	// A fresh tree directory: everything is replayed from the stream.
	s2 := startSequencer(t, nc, t.TempDir(), key)
	p, err := c.Append(context.Background(), "acme", pipeline.NewLeaf(leaves[7]))
	if err != nil {
		t.Fatal(err)
	}
	if p.Inclusion.LeafIndex != 7 || p.Inclusion.TreeSize != 50 {
		t.Fatalf("after replay, a retried leaf got %d at size %d", p.Inclusion.LeafIndex, p.Inclusion.TreeSize)
	}
	if got, _ := s2.Tree().RootAt(50); got != root1 {
		t.Fatal("replayed tree has another root")
	}
}

func TestSecondSequencerIsFenced(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	c, _ := pipeline.NewClient(nc, pipeline.ClientConfig{Timeout: 3 * time.Second})
	a := startSequencer(t, nc, t.TempDir(), key)
	<-a.Ready()
	seen := map[uint64][]byte{}
	appendOne := func(i int) {
		leaf := []byte(fmt.Sprintf(`{"fence":%d}`, i))
		p, err := c.Append(context.Background(), "acme", pipeline.NewLeaf(leaf))
		if err != nil {
			t.Fatal(err)
		}
		checkProof(t, key, leaf, p)
		if prev, dup := seen[p.Inclusion.LeafIndex]; dup {
			t.Fatalf("index %d assigned twice: %s and %s", p.Inclusion.LeafIndex, prev, leaf)
		}
		seen[p.Inclusion.LeafIndex] = leaf
	}
	for i := 0; i < 10; i++ {
		appendOne(i)
	}
	// A second sequencer on the same tenant: both now take requests from the same
	// consumer. The first time the one that did not commit last tries to commit, the
	// broker refuses it.
	b := startSequencer(t, nc, t.TempDir(), key)
	<-b.Ready()
	var fenced error
	deadline := time.Now().Add(20 * time.Second)
	for i := 10; fenced == nil && time.Now().Before(deadline); i++ {
		appendOne(i)
		select {
		case fenced = <-a.done:
			a.done <- fenced
		case fenced = <-b.done:
			b.done <- fenced
		default:
		}
	}
	if !errors.Is(fenced, ErrFenced) {
		t.Fatalf("neither sequencer was fenced: %v", fenced)
	}
	// The survivor goes on; the indices stay one gap-free sequence.
	n := len(seen)
	for i := 0; i < 20; i++ {
		appendOne(10000 + i)
	}
	for i := uint64(0); i < uint64(n+20); i++ {
		if _, ok := seen[i]; !ok {
			t.Fatalf("gap at %d", i)
		}
	}
}

// TestCommitRetryAfterLostAnswer: a commit that landed although its answer was lost
// (a timeout under load) is retried with the same Nats-Msg-Id and the old expected
// sequence. The broker answers that retry with a duplicate or with "wrong last
// sequence"; either way it is our batch, and the sequencer must not think itself
// fenced.
func TestCommitRetryAfterLostAnswer(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	s, err := New(Config{Tenant: "acme", Conn: nc, Dir: t.TempDir(), Signer: receipt.KeySigner{Key: key}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := &pipeline.Batch{First: 0, Leaves: []pipeline.Leaf{pipeline.NewLeaf([]byte("one")), pipeline.NewLeaf([]byte("two"))}}
	if err := s.commit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	seq := s.lastSeq
	s.lastSeq = 0 // as if the first attempt's answer never came
	if err := s.commit(context.Background(), b); err != nil {
		t.Fatalf("retry of a landed commit: %v", err)
	}
	if s.lastSeq != seq {
		t.Fatalf("retry recorded sequence %d, the batch is at %d", s.lastSeq, seq)
	}
	// A different batch at the same position is someone else's: fenced.
	s.lastSeq = 0
	other := &pipeline.Batch{First: 0, Leaves: []pipeline.Leaf{pipeline.NewLeaf([]byte("three"))}}
	if err := s.commit(context.Background(), other); !errors.Is(err, ErrFenced) {
		t.Fatalf("a different batch at a taken position: %v", err)
	}
}

// A producer in hash-only mode chooses its leaf hashes, so it can make two share the
// 8-byte prefix the idempotency window keys on: a retry of either still gets its own
// index, never a second one.
func TestCollidingHashPrefixesKeepTheirIndices(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	startSequencer(t, nc, t.TempDir(), key)
	c, _ := pipeline.NewClient(nc, pipeline.ClientConfig{})
	var leaves []pipeline.Leaf
	for i := range 3 {
		var h merkle.Hash
		copy(h[:], "samepref") // the first 8 bytes of all three
		h[31] = byte(i + 1)
		leaves = append(leaves, pipeline.Leaf{Hash: h})
	}
	ctx := context.Background()
	for round := range 2 {
		for i, l := range leaves {
			p, err := c.Append(ctx, "acme", l)
			if err != nil {
				t.Fatal(err)
			}
			if p.Inclusion.LeafIndex != uint64(i) || p.Inclusion.TreeSize != 3 && round == 1 {
				t.Fatalf("round %d: leaf %d got index %d at size %d, want index %d (size 3 on the retry)", round, i, p.Inclusion.LeafIndex, p.Inclusion.TreeSize, i)
			}
		}
	}
}

func TestRecentRemembersCollidingPrefixes(t *testing.T) {
	r := newRecent(4)
	hash := func(last byte) merkle.Hash {
		var h merkle.Hash
		copy(h[:], "samepref")
		h[31] = last
		return h
	}
	for i := range 6 {
		r.add(hash(byte(i)), uint64(i))
	}
	for i := 2; i < 6; i++ { // the window holds the last four
		if got, ok := r.get(hash(byte(i))); !ok || got != uint64(i) {
			t.Errorf("leaf %d: got %d %v", i, got, ok)
		}
	}
}

// A clock that steps back between batches never makes a head older than the one the
// sequencer handed out before it.
func TestHeadTimestampsNeverGoBack(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	var mu sync.Mutex
	clock := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	s, err := New(Config{Tenant: "acme", Conn: nc, Dir: t.TempDir(), Signer: receipt.KeySigner{Key: key}, LogID: "acme-log",
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	c, _ := pipeline.NewClient(nc, pipeline.ClientConfig{})
	var prev time.Time
	for i, step := range []time.Duration{0, -time.Hour, -time.Minute, 2 * time.Hour} {
		mu.Lock()
		clock = clock.Add(step)
		mu.Unlock()
		leaf := []byte(fmt.Sprintf(`{"i":%d}`, i))
		p, err := c.Append(context.Background(), "acme", pipeline.NewLeaf(leaf))
		if err != nil {
			t.Fatal(err)
		}
		at, err := time.Parse(time.RFC3339Nano, checkProof(t, key, leaf, p).Timestamp)
		if err != nil {
			t.Fatal(err)
		}
		if at.Before(prev) {
			t.Errorf("head %d stamped %s, before the previous head's %s", i, at, prev)
		}
		if step > 0 && !at.Equal(clock) {
			t.Errorf("head %d stamped %s; the clock moved forward to %s", i, at, clock)
		}
		prev = at
	}
}
