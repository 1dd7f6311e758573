package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"svc.dev/svc/conformance"
	"svc.dev/svc/conformance/vectorgen"
)

func corpusKeyArgs(c *vectorgen.Corpus) []string {
	return []string{"--issuer-key", c.Keys["gateway"], "--gateway-key", c.Keys["gateway-2"], "--issuer-key", c.Keys["sdk"],
		"--principal-key", c.Keys["alice"], "--log-key", c.Keys["log"], "--log-id", c.LogID}
}

// TestVerifyBatchCLI runs svc verify over a generated corpus directory: FAIL lines for
// exactly the tampered receipts, the summary and exit 1; --json lines, one per bundle
// with its first failing check, then the summary; --html; a list on stdin of good
// receipts only, exit 0; --checkpoint failing the receipts of a forked log.
func TestVerifyBatchCLI(t *testing.T) {
	c, err := vectorgen.WriteCorpus(t.TempDir(), vectorgen.CorpusOptions{Receipts: 800})
	if err != nil {
		t.Fatal(err)
	}
	keys := corpusKeyArgs(c)

	code, out, errOut := runSvc(t, append([]string{"verify", c.Bundles}, keys...)...)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	var fails []string
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "FAIL "); ok {
			path, rest, _ := strings.Cut(rest, ": ")
			check, _, _ := strings.Cut(rest, ": ")
			if want := c.Tampered[path]; want != check {
				t.Errorf("FAIL line %q: want check %q", line, want)
			}
			fails = append(fails, path)
		}
	}
	if len(fails) != len(c.Tampered) {
		t.Errorf("%d FAIL lines, %d tampered receipts", len(fails), len(c.Tampered))
	}
	for _, want := range []string{"BATCH: 800 bundles", "FIRST FAILING CHECK", "BY ISSUER KIND", "BY TOOL", "BY EXECUTION STATUS", "BY PROVENANCE OF THE EXECUTION", "RESULT: FAILED (51 of 800 bundles)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the summary lacks %q:\n%s", want, out)
		}
	}

	html := filepath.Join(t.TempDir(), "audit.html")
	code, out, _ = runSvc(t, append([]string{"verify", c.Bundles, "--json", "--html", html, "--workers", "3"}, keys...)...)
	if code != 1 {
		t.Fatalf("--json: exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != c.Receipts+1 {
		t.Fatalf("%d JSON lines for %d receipts", len(lines), c.Receipts)
	}
	failed := 0
	for _, l := range lines[:len(lines)-1] {
		var r conformance.BundleResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		if r.FailedCheck != c.Tampered[r.Path] {
			t.Errorf("%s: failedCheck %q, want %q", r.Path, r.FailedCheck, c.Tampered[r.Path])
		}
		if !r.Verified {
			failed++
		}
	}
	var last struct{ Summary *conformance.Summary }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Summary == nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	if last.Summary.Failed != failed || failed != len(c.Tampered) || last.Summary.Workers != 3 {
		t.Errorf("summary failed %d workers %d; lines failed %d; tampered %d", last.Summary.Failed, last.Summary.Workers, failed, len(c.Tampered))
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RESULT: FAILED", "by agent", "by tool", "agent-c", conformance.CheckAuthBeforeExecution, fails[0]} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the HTML report lacks %q", want)
		}
	}
	if strings.Contains(string(page), "<script") || strings.Contains(string(page), "src=") || strings.Contains(string(page), "<link") {
		t.Error("the HTML report loads something: it must read offline")
	}

	// Only the good receipts, as a list on stdin.
	var good []string
	err = filepath.WalkDir(c.Bundles, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".authorization.json") && c.Tampered[p] == "" {
			good = append(good, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	verifyStdin = strings.NewReader(strings.Join(good, "\n") + "\n\n")
	t.Cleanup(func() { verifyStdin = os.Stdin })
	code, out, errOut = runSvc(t, append([]string{"verify", "-"}, keys...)...)
	if code != 0 || !strings.Contains(out, "RESULT: VERIFIED (all "+strconv.Itoa(len(good))+" bundles)") {
		t.Fatalf("stdin list: exit %d\n%s\n%s", code, out, errOut)
	}

	// Tied to the witnessed checkpoint: the forked receipts fail too.
	code, _, errOut = runSvc(t, append([]string{"verify", c.Bundles, "--checkpoint", c.Checkpoint}, keys...)...)
	if code != 2 || !strings.Contains(errOut, "--witness-key") {
		t.Fatalf("--checkpoint without a witness key: exit %d, %s", code, errOut)
	}
	code, out, _ = runSvc(t, append([]string{"verify", c.Bundles, "--checkpoint", c.Checkpoint, "--witness-key", c.Keys["witness"], "--log", c.LogFile}, keys...)...)
	if code != 1 {
		t.Fatalf("--checkpoint: exit %d", code)
	}
	for _, p := range c.Forked {
		if !strings.Contains(out, "FAIL "+p+": ") {
			t.Errorf("the forked receipt %s did not fail against the checkpoint", p)
		}
	}

	// One file keeps SPEC.md's single-bundle report.
	code, out, _ = runSvc(t, append([]string{"verify", good[0]}, keys...)...)
	if code != 0 || !strings.HasPrefix(out, "PASS "+conformance.CheckReceiptSignature) || strings.Contains(out, "BATCH:") || !slices.Contains(strings.Split(out, "\n"), "RESULT: VERIFIED") {
		t.Errorf("single bundle: exit %d\n%s", code, out)
	}
}
