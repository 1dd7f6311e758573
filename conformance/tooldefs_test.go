package conformance

import (
	"context"
	"path/filepath"
	"testing"
)

// TestBatchChecksToolStatementOnce: in a batch, receipts citing the same
// tool-definitions statement share its checks (signature, predicate, head, inclusion;
// batchcache.go), and each receipt's verdict is the one it gets alone: the cited
// definition passes, one never logged fails "tool definition logged".
func TestBatchChecksToolStatementOnce(t *testing.T) {
	m, err := LoadManifest(vectorsDir)
	if err != nil {
		t.Fatal(err)
	}
	var cited, unlogged *Case
	for i := range m.Cases {
		switch m.Cases[i].Name {
		case "gateway-tool-definition":
			cited = &m.Cases[i]
		case "gateway-tool-definition-never-logged":
			unlogged = &m.Cases[i]
		}
	}
	if cited == nil || unlogged == nil {
		t.Fatal("the tool-definition vectors are missing")
	}
	opts, err := caseOptions(vectorsDir, m, cited)
	if err != nil {
		t.Fatal(err)
	}
	b := NewBatch(opts, BatchOptions{Workers: 1})
	paths := make(chan string, 4)
	for _, c := range []*Case{cited, cited, cited, unlogged} {
		paths <- filepath.Join(vectorsDir, c.Bundle)
	}
	close(paths)
	var results []*BundleResult
	if _, err := b.Run(context.Background(), paths, func(r *BundleResult) error { results = append(results, r); return nil }); err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		want := ""
		if i == 3 {
			want = CheckToolDefinitionLogged
		}
		if r.Verified != (want == "") || r.FailedCheck != want {
			t.Fatalf("bundle %d (%s): verified %v, failed %q (%s); want failed %q", i, filepath.Base(r.Path), r.Verified, r.FailedCheck, r.Detail, want)
		}
	}
	if n := len(b.opts.cache.statements.m); n != 1 {
		t.Fatalf("%d statements' checks cached, want 1 (the one statement given)", n)
	}
}
