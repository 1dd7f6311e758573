package receipt_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Concurrent appends to a FileLog share commits (one write and one fsync for the
// leaves waiting), and still each gets its own index, durable on return, with a proof
// that verifies against a signed head; a leaf appended twice at once gets one index;
// an oversized leaf in a shared batch is refused alone.
func TestFileLogGroupCommit(t *testing.T) {
	k := testKey(t, 1)
	path := filepath.Join(t.TempDir(), "log.jsonl")
	l, err := receipt.OpenFileLog(path, k, "")
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	leaves := make([][]byte, n)
	for i := range leaves {
		leaves[i] = receipt.Sign(receipt.PayloadInToto, fmt.Appendf(nil, `{"i":%d}`, i), k).Canonical()
	}
	big := receipt.Sign(receipt.PayloadInToto, bytes.Repeat([]byte("x"), merkle.MaxLineSize), k).Canonical()
	type result struct {
		leaf  []byte
		proof *receipt.Proof
		err   error
	}
	results := make([]result, n+4)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range results {
		leaf := leaves[i%n]
		if i == n+3 {
			leaf = big
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			p, err := l.Append(context.Background(), leaf)
			results[i] = result{leaf, p, err}
		}()
	}
	close(start)
	wg.Wait()

	heads := map[uint64]bool{}
	index := map[string]uint64{}
	for i, r := range results {
		if bytes.Equal(r.leaf, big) {
			if !errors.Is(r.err, receipt.ErrLogRefused) {
				t.Errorf("oversized leaf: err %v, want ErrLogRefused", r.err)
			}
			continue
		}
		if r.err != nil {
			t.Fatalf("append %d: %v", i, r.err)
		}
		env, err := receipt.ParseEnvelope(r.leaf)
		if err != nil {
			t.Fatal(err)
		}
		checkProof(t, &receipt.Bundle{Envelope: env, TreeHead: r.proof.TreeHead, Inclusion: r.proof.Inclusion}, []signer.PublicKey{k.Public()})
		if prev, ok := index[string(r.leaf)]; ok && prev != r.proof.Inclusion.LeafIndex {
			t.Errorf("leaf %d logged at %d and %d", i%n, prev, r.proof.Inclusion.LeafIndex)
		}
		index[string(r.leaf)] = r.proof.Inclusion.LeafIndex
		heads[r.proof.Inclusion.TreeSize] = true
	}
	if got := l.File().Size(); got != n {
		t.Errorf("log holds %d leaves, want %d (each distinct leaf once)", got, n)
	}
	seen := map[uint64]bool{}
	for _, i := range index {
		if seen[i] {
			t.Errorf("index %d assigned twice", i)
		}
		seen[i] = true
	}
	// Callers that arrived while a commit was in progress shared the next one: far
	// fewer heads (one per commit) than appends.
	if len(heads) >= n/2 {
		t.Errorf("%d appends were answered with %d distinct heads: concurrent appends did not share commits", len(results), len(heads))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Durable: the reopened file holds every leaf at the index it was given.
	l2, err := receipt.OpenFileLog(path, k, "")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	for leaf, i := range index {
		if j, ok := l2.File().IndexOf(merkle.LeafHash([]byte(leaf))); !ok || j != i {
			t.Errorf("after reopen a leaf is at %d (%v), was acknowledged at %d", j, ok, i)
		}
	}
}
