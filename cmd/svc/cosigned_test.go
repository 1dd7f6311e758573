package main

import (
	"crypto/rand"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/conformance"
	"svc.dev/svc/conformance/vectorgen"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/monitor"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

// newCosigners makes n tlog-cosignature/v1 cosigners.
func newCosigners(t *testing.T, n int) []*witness.Cosigner {
	t.Helper()
	var out []*witness.Cosigner
	for i := range n {
		k, _ := signer.GenerateKey()
		c, err := witness.NewCosigner(fmt.Sprintf("w%d.example.com", i), k, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// TestVerifyCheckpointUnderPolicy: svc verify --checkpoint <C2SP note> --policy <file>
// ties the receipts to a checkpoint cosigned by the policy's quorum: the good receipts
// verify (witness covers: consistent with the cosigned checkpoint), the forked ones
// fail; a checkpoint short of the quorum is refused before any receipt is read;
// --policy without --checkpoint is a usage error.
func TestVerifyCheckpointUnderPolicy(t *testing.T) {
	c, err := vectorgen.WriteCorpus(t.TempDir(), vectorgen.CorpusOptions{Receipts: 60})
	if err != nil {
		t.Fatal(err)
	}
	lc, err := conformance.OpenFileCopy(c.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := lc.Size()
	root, _ := lc.RootAt(size)
	skey, vkey, _ := note.GenerateKey(rand.Reader, "acme-fleet")
	ls, _ := note.NewSigner(skey)
	cos := newCosigners(t, 2)
	dir := t.TempDir()
	write := func(name string, signers ...note.Signer) string {
		signed, err := note.Sign(&note.Note{Text: projections.CheckpointBody("acme-fleet", size, root)}, signers...)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, signed, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full, short := write("full.checkpoint", ls, cos[0], cos[1]), write("short.checkpoint", ls, cos[1])
	policy := filepath.Join(dir, "policy")
	pol := fmt.Sprintf("log %s\nwitness A %s\nwitness B %s\ngroup both all A B\nquorum both\n", vkey, cos[0].VerifierKey(), cos[1].VerifierKey())
	if err := os.WriteFile(policy, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	var good []string
	_ = filepath.WalkDir(c.Bundles, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".authorization.json") && c.Tampered[p] == "" && !slices.Contains(c.Forked, p) {
			good = append(good, p)
		}
		return err
	})
	keys := corpusKeyArgs(c)
	code, out, errOut := runSvc(t, append([]string{"verify", good[0], "--checkpoint", full, "--policy", policy, "--log", c.LogFile}, keys...)...)
	if code != 0 || !strings.Contains(out, "consistent with the C2SP checkpoint at size") || !strings.Contains(out, "witnesses A, B") && !strings.Contains(out, "witnesses B, A") {
		t.Fatalf("a good receipt under the policy: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = runSvc(t, append([]string{"verify", c.Bundles, "--checkpoint", full, "--policy", policy, "--log", c.LogFile}, keys...)...)
	for _, p := range c.Forked {
		if code != 1 || !strings.Contains(out, "FAIL "+p+": ") {
			t.Errorf("the forked receipt %s did not fail against the cosigned checkpoint (exit %d)", p, code)
		}
	}
	code, _, errOut = runSvc(t, append([]string{"verify", good[0], "--checkpoint", short, "--policy", policy, "--log", c.LogFile}, keys...)...)
	if code != 1 || !strings.Contains(errOut, `quorum "both" is not met`) {
		t.Fatalf("a checkpoint short of the quorum: exit %d\n%s", code, errOut)
	}
	// A policy that needs 2 of 3 witnesses, of which only B cosigned: refused, naming
	// what the quorum needs, who cosigned and who did not.
	extra := newCosigners(t, 1)[0]
	pol3 := fmt.Sprintf("log %s\nwitness A %s\nwitness B %s\nwitness C %s\ngroup two 2 A B C\nquorum two\n", vkey, cos[0].VerifierKey(), cos[1].VerifierKey(), extra.VerifierKey())
	policy3 := filepath.Join(dir, "policy-2-of-3")
	if err := os.WriteFile(policy3, []byte(pol3), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runSvc(t, append([]string{"verify", good[0], "--checkpoint", short, "--policy", policy3, "--log", c.LogFile}, keys...)...)
	if want := `quorum "two" is not met: it needs 2 of (A, B, C); cosigned by B; no cosignature from A, C`; code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("2 of 3 with one cosignature: exit %d, want 1 and %q\n%s\n%s", code, want, out, errOut)
	}
	if code, _, errOut = runSvc(t, append([]string{"verify", good[0], "--policy", policy}, keys...)...); code != 2 || !strings.Contains(errOut, "--policy needs --checkpoint") {
		t.Fatalf("--policy alone: exit %d\n%s", code, errOut)
	}
}

// TestLogCheckPolicy: svc's log sends each C2SP checkpoint to a C2SP witness (svc's
// own tlog-witness here) and publishes its cosignature at /t/<tenant>/checkpoint;
// svc log-check --policy passes when the policy's quorum is that witness, and fails
// naming the quorum when it needs a witness that did not cosign.
func TestLogCheckPolicy(t *testing.T) {
	key, _ := signer.GenerateKey()
	wkey, _ := signer.GenerateKey()
	origin := projections.DefaultOrigin("", "acme")
	lvkey, err := note.NewEd25519VerifierKey(origin, key.Public().Key)
	if err != nil {
		t.Fatal(err)
	}
	tw, err := witness.NewTlogWitness(witness.TlogConfig{Key: wkey, Name: "w.example.com/1", Logs: []string{lvkey}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ws := httptest.NewServer(tw)
	defer ws.Close()
	l := logtest.Start(t, logtest.Options{Key: key, Witnesses: []string{ws.URL}, Tenants: []logtest.Tenant{{ID: "acme", Token: "tok"}}})
	grow(t, l, "acme", 3)
	grow(t, l, "acme", 5) // the second checkpoint is proved to the witness from the first
	others := newCosigners(t, 2)
	other := others[0]
	dir := t.TempDir()
	for _, c := range []struct {
		policy string
		code   int
		want   string
	}{
		{"witness W " + tw.VerifierKey() + "\nquorum W\n", 0, "size 8 cosigned by witnesses W"},
		{"witness W " + tw.VerifierKey() + "\nwitness X " + other.VerifierKey() + "\ngroup g all W X\nquorum g\n", 1, `quorum "g" is not met`},
		{"witness W " + tw.VerifierKey() + "\nwitness X " + other.VerifierKey() + "\nwitness Y " + others[1].VerifierKey() + "\ngroup g 2 X W Y\nquorum g\n", 1,
			`quorum "g" is not met: it needs 2 of (X, W, Y); cosigned by W; no cosignature from X, Y`},
	} {
		p := filepath.Join(dir, "policy")
		if err := os.WriteFile(p, []byte(c.policy), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runSvc(t, "log-check", "--log-url", l.URL, "--tenant", "acme", "--policy", p)
		if code != c.code || !strings.Contains(out, monitor.CheckCosigned) || !strings.Contains(out, c.want) {
			t.Fatalf("policy %q: exit %d\n%s\n%s", c.policy, code, out, errOut)
		}
	}
}
