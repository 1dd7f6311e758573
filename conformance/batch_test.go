package conformance_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/conformance"
	"svc.dev/svc/conformance/vectorgen"
	"svc.dev/svc/signer"
)

// corpusReceipts is the size of the corpus the CI test generates; the figures of
// docs and BenchmarkBatchCorpus use 100,000 (SVC_CORPUS_RECEIPTS overrides both).
const corpusReceipts = 20000

// corpusSize is SVC_CORPUS_RECEIPTS when set, else def.
func corpusSize(tb testing.TB, def int) int {
	v := os.Getenv("SVC_CORPUS_RECEIPTS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("SVC_CORPUS_RECEIPTS=%q: want a positive number of receipts", v)
	}
	return n
}

func corpusOptions(t testing.TB, c *vectorgen.Corpus) conformance.Options {
	t.Helper()
	load := func(names ...string) []signer.PublicKey {
		var out []signer.PublicKey
		for _, n := range names {
			k, err := signer.LoadPublicKey(c.Keys[n])
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, k)
		}
		return out
	}
	return conformance.Options{
		IssuerKeys: load("gateway", "gateway-2", "sdk"), PrincipalKeys: load("alice"), LogKeys: load("log"),
		LogID: c.LogID, ProviderSecrets: map[string][]byte{},
	}
}

// runBatch verifies the corpus directory and returns the summary and every failed result by path.
func runBatch(t testing.TB, dir string, opts conformance.Options) (*conformance.Summary, map[string]*conformance.BundleResult) {
	t.Helper()
	b := conformance.NewBatch(opts, conformance.BatchOptions{KeepFailures: -1})
	paths := make(chan string, 256)
	walkErr := make(chan error, 1)
	go func() { walkErr <- conformance.WalkBundles(context.Background(), []string{dir}, nil, paths, b.Found) }()
	failed := map[string]*conformance.BundleResult{}
	s, err := b.Run(context.Background(), paths, func(r *conformance.BundleResult) error {
		if !r.Verified {
			failed[r.Path] = r
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-walkErr; err != nil {
		t.Fatal(err)
	}
	return s, failed
}

// TestBatchCorpus verifies a generated corpus of 20,000 receipts (two gateways and an
// SDK on one hosted log, three copies of each typical tampering; SVC_CORPUS_RECEIPTS
// sets another size, and 100,000 passes in about 72 s) as one batch: it must
// fail exactly the tampered receipts, each with the first failing check it was built
// for and with the check and detail that verifying that bundle alone reports. Then the
// batch is tied to the witnessed checkpoint, which must also fail the receipts logged
// in a fork of the log.
func TestBatchCorpus(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	c, err := vectorgen.WriteCorpus(dir, vectorgen.CorpusOptions{Receipts: corpusSize(t, corpusReceipts)})
	if err != nil {
		t.Fatal(err)
	}
	causes := map[string]int{}
	for _, cause := range c.Causes {
		causes[cause]++
	}
	if len(causes) < 15 || len(c.Forked) != 3 {
		t.Fatalf("the corpus planted %d causes (%v) and %d forked receipts", len(causes), causes, len(c.Forked))
	}
	opts := corpusOptions(t, c)

	t.Logf("generated %d receipts in %v", c.Receipts, time.Since(start))
	start = time.Now()
	s, failed := runBatch(t, c.Bundles, opts)
	t.Logf("verified in %v", time.Since(start))
	if s.Bundles != c.Receipts || s.Failed != len(c.Tampered) || s.Verified != c.Receipts-len(c.Tampered) {
		t.Fatalf("bundles %d verified %d failed %d; the corpus has %d receipts, %d tampered", s.Bundles, s.Verified, s.Failed, c.Receipts, len(c.Tampered))
	}
	for path, want := range c.Tampered {
		r := failed[path]
		if r == nil {
			t.Errorf("%s (%s) verified", path, c.Causes[path])
			continue
		}
		if r.FailedCheck != want {
			t.Errorf("%s (%s): first failed check %q, want %q (%s)", path, c.Causes[path], r.FailedCheck, want, r.Detail)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		alone := conformance.VerifyBytes(data, opts)
		var detail string
		for _, ch := range alone.Checks {
			if !ch.OK {
				detail = ch.Detail
				break
			}
		}
		if alone.FirstFailure() != r.FailedCheck || detail != r.Detail || len(alone.Checks) != r.Checks {
			t.Errorf("%s: the batch reports %q (%s, %d checks), alone %q (%s, %d checks)", path, r.FailedCheck, r.Detail, r.Checks, alone.FirstFailure(), detail, len(alone.Checks))
		}
	}
	byCheck := map[string]int{}
	for _, want := range c.Tampered {
		byCheck[want]++
	}
	for check, n := range byCheck {
		if s.ByFailedCheck[check] != n {
			t.Errorf("summary counts %d failures of %q, want %d", s.ByFailedCheck[check], check, n)
		}
	}
	if g, sdk := s.ByIssuer["gateway"], s.ByIssuer["sdk"]; g.Verified == 0 || sdk.Verified == 0 || g.Verified+g.Failed+sdk.Verified+sdk.Failed+s.ByIssuer[conformance.NotVerified].Failed != s.Bundles {
		t.Errorf("by issuer: %+v", s.ByIssuer)
	}
	if s.ByTool["transfer"].Verified == 0 || s.ByStatus["denied"].Verified == 0 || s.ByExecution["claimed"].Verified == 0 || s.ByAgent["agent-c"].Verified == 0 {
		t.Errorf("summary groups: tools %v statuses %v executions %v agents %v", s.ByTool, s.ByStatus, s.ByExecution, s.ByAgent)
	}
	// Grants and heads are shared: far fewer checked than answered from the cache.
	if s.Cache.Hits < 10*s.Cache.Misses {
		t.Errorf("cache: %d hits, %d misses", s.Cache.Hits, s.Cache.Misses)
	}

	// Tied to the witnessed checkpoint, with the log copy proving consistency.
	cp, err := conformance.ReadHeadFile(c.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	logCopy, err := conformance.OpenFileCopy(c.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	witness, err := signer.LoadPublicKey(c.Keys["witness"])
	if err != nil {
		t.Fatal(err)
	}
	opts.WitnessKeys, opts.WitnessHead, opts.WitnessLog = []signer.PublicKey{witness}, cp, logCopy
	s, failed = runBatch(t, c.Bundles, opts)
	if s.Failed != len(c.Tampered)+len(c.Forked) {
		t.Errorf("with the checkpoint: %d failed, want %d tampered and %d forked", s.Failed, len(c.Tampered), len(c.Forked))
	}
	for _, path := range c.Forked {
		r := failed[path]
		if r == nil || r.FailedCheck != conformance.CheckWitnessCovers {
			t.Errorf("forked %s: %+v", path, r)
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if alone := conformance.VerifyBytes(data, opts); alone.FirstFailure() != r.FailedCheck {
			t.Errorf("forked %s: alone %q, in the batch %q", path, alone.FirstFailure(), r.FailedCheck)
		}
	}
	for path, want := range c.Tampered {
		if r := failed[path]; r == nil || r.FailedCheck != want {
			t.Errorf("with the checkpoint, %s: %+v, want %q", path, r, want)
		}
	}
}

// BenchmarkBatchCorpus measures a batch over a generated corpus directory: the
// directory walk, file reads, parsing and every check, on -cpu cores. The corpus has
// SVC_CORPUS_RECEIPTS receipts (default 100,000), or is read from SVC_CORPUS_DIR (a
// directory written by go run ./conformance/cmd/gencorpus). bundles/s is per run.
func BenchmarkBatchCorpus(b *testing.B) {
	dir := os.Getenv("SVC_CORPUS_DIR")
	n := corpusSize(b, 100000)
	if dir == "" {
		dir = b.TempDir()
	}
	c, err := vectorgen.WriteCorpus(dir, vectorgen.CorpusOptions{Receipts: n})
	if err != nil {
		b.Fatal(err)
	}
	opts := corpusOptions(b, c)
	b.ReportAllocs()
	b.ResetTimer()
	var bundles int
	for b.Loop() {
		s, _ := runBatch(b, c.Bundles, opts)
		if s.Failed != len(c.Tampered) {
			b.Fatalf("%d failed, want %d", s.Failed, len(c.Tampered))
		}
		bundles += s.Bundles
	}
	b.ReportMetric(float64(bundles)/b.Elapsed().Seconds(), "bundles/s")
}

// BenchmarkBatchVerifyBytes measures the verifier of a batch alone, bundles in memory
// (no directory walk, no file reads): gateway and SDK receipts of a generated corpus,
// each verified in turn with the batch's shared checks. Run with -cpu 1 for a per-core
// figure; bundles/s is per second of one core.
func BenchmarkBatchVerifyBytes(b *testing.B) {
	c, err := vectorgen.WriteCorpus(b.TempDir(), vectorgen.CorpusOptions{Receipts: 4000})
	if err != nil {
		b.Fatal(err)
	}
	var gateway, sdk [][]byte
	err = filepath.WalkDir(c.Bundles, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".authorization.json") || c.Tampered[p] != "" || slices.Contains(c.Forked, p) {
			return err
		}
		data, err := os.ReadFile(p)
		if strings.Contains(p, "/sdk/") {
			sdk = append(sdk, data)
		} else {
			gateway = append(gateway, data)
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, set := range []struct {
		name    string
		bundles [][]byte
	}{{"gateway", gateway}, {"sdk", sdk}} {
		// The same bundles verified one by one, as svc verify <file> does: the peer
		// of the batch figure, measured in the same run.
		b.Run(set.name+"-alone", func(b *testing.B) {
			opts := corpusOptions(b, c)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if r := conformance.VerifyBytes(set.bundles[i%len(set.bundles)], opts); !r.Verified {
					b.Fatal(r.FirstFailure())
				}
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "bundles/s")
		})
		b.Run(set.name, func(b *testing.B) {
			batch := conformance.NewBatch(corpusOptions(b, c), conformance.BatchOptions{})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if r := batch.VerifyBytes("", set.bundles[i%len(set.bundles)]); !r.Verified {
					b.Fatal(r.FailedCheck, r.Detail)
				}
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "bundles/s")
		})
	}
}

// TestHTMLReportClaims (issue 29, point 11): a failed receipt's tool, agent and
// status are claims nothing vouches for, so the groups count every failed bundle
// under NotVerified, never under the tool it names; the HTML report lists every
// receipt with its result, a failed one's values marked "claimed".
func TestHTMLReportClaims(t *testing.T) {
	c, err := vectorgen.WriteCorpus(t.TempDir(), vectorgen.CorpusOptions{Receipts: 120})
	if err != nil {
		t.Fatal(err)
	}
	s, failed := runBatch(t, c.Bundles, corpusOptions(t, c))
	if len(failed) == 0 || s.Failed != len(failed) {
		t.Fatalf("%d failed of %d", s.Failed, s.Bundles)
	}
	for name, g := range map[string]map[string]conformance.Counts{"tool": s.ByTool, "agent": s.ByAgent, "issuer": s.ByIssuer, "status": s.ByStatus, "execution": s.ByExecution} {
		for k, n := range g {
			if k != conformance.NotVerified && n.Failed != 0 {
				t.Errorf("by %s: %q counts %d failed bundles under a value they only claim", name, k, n.Failed)
			}
		}
		if g[conformance.NotVerified].Failed != s.Failed || g[conformance.NotVerified].Verified != 0 {
			t.Errorf("by %s: %s %+v, want %d failed", name, conformance.NotVerified, g[conformance.NotVerified], s.Failed)
		}
	}
	var page bytes.Buffer
	if err := s.WriteHTML(&page, conformance.HTMLInfo{Generated: time.Now()}); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	if len(s.Receipts) != s.Bundles || !strings.Contains(html, "<h2>Receipts</h2>") {
		t.Fatalf("%d receipts listed of %d", len(s.Receipts), s.Bundles)
	}
	for _, r := range s.Receipts {
		if !strings.Contains(html, r.Path) {
			t.Fatalf("the report does not list %s", r.Path)
		}
		if !r.Verified && r.Tool != "" && !strings.Contains(html, "claimed: "+r.Tool) {
			t.Fatalf("failed %s: its tool %q is not marked claimed", r.Path, r.Tool)
		}
	}
}
