package conformance

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestEveryEditedByteFails edits every significant byte of a pre-committed gateway
// bundle, one at a time, and requires the verifier to fail. The byte is replaced by
// another of the same class (digit, lowercase, uppercase, punctuation), so most edits
// still parse; an edit that breaks parsing fails the first check with a parse error.
// It also requires that the failure be reported in the part of the bundle edited.
func TestEveryEditedByteFails(t *testing.T) {
	m, err := LoadManifest(vectorsDir)
	if err != nil {
		t.Fatal(err)
	}
	var c *Case
	for i := range m.Cases {
		if m.Cases[i].Name == "gateway-precommit-executed" {
			c = &m.Cases[i]
		}
	}
	if c == nil {
		t.Fatal("vector gateway-precommit-executed missing")
	}
	orig, err := os.ReadFile(filepath.Join(vectorsDir, c.Bundle))
	if err != nil {
		t.Fatal(err)
	}
	base, err := RunCase(vectorsDir, m, c)
	if err != nil || !base.Verified {
		t.Fatalf("the unedited bundle must verify: %v %+v", err, base)
	}
	// Which top-level field each byte offset lies in.
	tePos := bytes.Index(orig, []byte(`"treeHead"`))
	incPos := bytes.Index(orig, []byte(`"inclusion"`))
	if tePos < 0 || incPos < 0 {
		t.Fatal("bundle layout unexpected")
	}
	allowed := func(off int) map[string]bool {
		switch {
		case off >= incPos:
			return map[string]bool{CheckTreeHeadSize: true, CheckInclusion: true, CheckLogFileRoot: true}
		case off >= tePos:
			return map[string]bool{CheckTreeHeadSignature: true, CheckTreeHeadSize: true, CheckInclusion: true, CheckTreeHeadLog: true}
		default:
			return map[string]bool{CheckReceiptSignature: true}
		}
	}
	opts := mustOptions(t, m, c)
	edits := 0
	for off := range orig {
		b := orig[off]
		nb := swap(b)
		if nb == b {
			continue // whitespace and structure that carries no value
		}
		mut := bytes.Clone(orig)
		mut[off] = nb
		data := mut
		rep := VerifyBytes(data, opts)
		edits++
		if rep.Verified {
			t.Fatalf("editing byte %d (%q → %q) still verifies", off, b, nb)
		}
		if first := rep.FirstFailure(); !allowed(off)[first] && !parseFailure(rep) {
			t.Errorf("editing byte %d (%q → %q) failed at %q, not in the edited part", off, b, nb, first)
		}
	}
	if edits < 1000 {
		t.Fatalf("only %d edits tried", edits)
	}
}

func parseFailure(r *Report) bool {
	return len(r.Checks) > 0 && !r.Checks[0].OK && bytes.HasPrefix([]byte(r.Checks[0].Detail), []byte("bundle does not parse"))
}

// swap returns another byte of the same class, or b itself for bytes it leaves alone.
func swap(b byte) byte {
	switch {
	case b >= '0' && b <= '8':
		return b + 1
	case b == '9':
		return '0'
	case b >= 'a' && b <= 'y':
		return b + 1
	case b == 'z':
		return 'a'
	case b >= 'A' && b <= 'Y':
		return b + 1
	case b == 'Z':
		return 'A'
	case b == '+':
		return '/'
	case b == '/':
		return '+'
	}
	return b
}

func mustOptions(t *testing.T, m *Manifest, c *Case) Options {
	t.Helper()
	// Reuse RunCase's key loading by running a case with the bundle swapped in.
	opts, err := caseOptions(vectorsDir, m, c)
	if err != nil {
		t.Fatal(err)
	}
	return opts
}
