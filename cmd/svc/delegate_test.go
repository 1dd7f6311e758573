package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// delegateFixture holds keys for a principal and four agents and a root grant from the
// principal to agent A (scopes a,b,c for two hours, naming A's key).
type delegateFixture struct {
	dir       string
	principal *signer.Key
	keys      map[string]string // name -> .key path
	pubs      map[string]string // name -> .pub path
	root      string            // the root grant file
}

func newDelegateFixture(t *testing.T) *delegateFixture {
	t.Helper()
	f := &delegateFixture{dir: t.TempDir(), keys: map[string]string{}, pubs: map[string]string{}}
	for _, n := range []string{"P", "A", "B", "C", "D"} {
		k, kp, pp := testKey(t, f.dir, n)
		if n == "P" {
			f.principal = k
		}
		f.keys[n], f.pubs[n] = kp, pp
	}
	f.root = f.path("A.grant.json")
	mustRun(t, "grant", "--key", f.keys["P"], "--principal", "alice", "--agent", "A", "--scopes", "a,b,c",
		"--ttl-hours", "2", "--out", f.root, "--agent-key", f.pubs["A"])
	return f
}

func (f *delegateFixture) path(name string) string { return filepath.Join(f.dir, name) }

// verify checks a grant file the way a gateway does, against the principal's key.
func (f *delegateFixture) verify(t *testing.T, path string) *receipt.Chain {
	t.Helper()
	c, k, err := receipt.VerifyGrant(readEnvelope(t, path), []signer.PublicKey{f.principal.Public()}, time.Now())
	if err != nil {
		t.Fatalf("%s does not verify: %v", path, err)
	}
	if k.KeyID != f.principal.KeyID() {
		t.Fatalf("root verified by %s", k.KeyID)
	}
	return c
}

func TestDelegateChainVerifies(t *testing.T) {
	f := newDelegateFixture(t)

	// Depth 2: A delegates to B.
	g2 := f.path("B.grant.json")
	out := mustRun(t, "delegate", "--key", f.keys["A"], "--parent", f.root, "--agent", "B", "--scopes", "b, a",
		"--ttl-hours", "1", "--out", g2, "--agent-key", f.pubs["B"])
	c2 := f.verify(t, g2)
	if c2.Depth() != 2 {
		t.Fatalf("depth %d, want 2", c2.Depth())
	}
	leaf := c2.Leaf()
	if leaf.Principal != "alice" || leaf.Agent != "B" || !slices.Equal(leaf.Scopes, []string{"b", "a"}) {
		t.Fatalf("leaf grant %+v", leaf)
	}
	if from, to, _ := leaf.Window(); to.Sub(from) != time.Hour {
		t.Fatalf("window %s .. %s, want one hour", leaf.IssuedAt, leaf.ExpiresAt)
	}
	// The parent is embedded exactly as it was signed.
	rootEnv := readEnvelope(t, f.root)
	if !bytes.Equal(leaf.Parent.Canonical(), rootEnv.Canonical()) {
		t.Fatal("the embedded parent differs from the parent grant file")
	}
	if fi, _ := os.Stat(g2); fi.Mode().Perm() != 0o600 {
		t.Errorf("grant file mode %v, want 0600", fi.Mode().Perm())
	}
	for _, want := range []string{"alice", "B", "2 grants deep", "by A", readKeyID(t, f.pubs["A"])} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}

	// Depth 3: B delegates to C. C's key is named, but the chain is full, so a note says
	// C cannot use it.
	g3 := f.path("C.grant.json")
	code, out, errOut := runSvc(t, "delegate", "--key", f.keys["B"], "--parent", g2, "--agent", "C", "--scopes", "a",
		"--ttl-hours", "0.5", "--out", g3, "--agent-key", f.pubs["C"])
	if code != 0 {
		t.Fatalf("depth 3: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "maximum chain depth") {
		t.Errorf("no note about the maximum depth: %q", errOut)
	}
	c3 := f.verify(t, g3)
	if c3.Depth() != 3 || c3.Leaf().Agent != "C" || c3.Root().Agent != "A" || c3.Leaf().Principal != "alice" {
		t.Fatalf("depth-3 chain: depth %d, leaf %+v", c3.Depth(), c3.Leaf())
	}

	// Depth 4 is refused before signing, and nothing is written.
	g4 := f.path("D.grant.json")
	code, _, errOut = runSvc(t, "delegate", "--key", f.keys["C"], "--parent", g3, "--agent", "D", "--scopes", "a",
		"--ttl-hours", "0.1", "--out", g4)
	if code != 1 || !strings.Contains(errOut, "at most 3") || !strings.Contains(errOut, "refusing to delegate") {
		t.Fatalf("depth 4: exit %d, stderr %q; want a refusal naming the limit", code, errOut)
	}
	assertNoFile(t, g4)
}

func TestDelegateRefusals(t *testing.T) {
	f := newDelegateFixture(t)
	out := f.path("sub.json")
	base := func(key string, extra ...string) []string {
		args := []string{"delegate", "--key", f.keys[key], "--parent", f.root, "--agent", "B", "--out", out}
		return append(args, extra...)
	}

	// A grant without agentKey: its agent cannot delegate.
	noKey := f.path("nokey.json")
	mustRun(t, "grant", "--key", f.keys["P"], "--principal", "alice", "--agent", "A", "--scopes", "a", "--ttl-hours", "1", "--out", noKey)

	// A parent that expired, and a chain whose link is not signed by the agentKey.
	expired := signGrant(t, f.principal, receipt.NewGrant("alice", "A", []string{"a"}, time.Now().Add(-3*time.Hour), time.Hour, pubPtr(t, f.pubs["A"]), nil))
	expiredPath := writeEnvelope(t, f.path("expired.json"), expired)
	rootEnv := readEnvelope(t, f.root)
	forged := signGrant(t, f.principal, receipt.NewGrant("alice", "B", []string{"a"}, time.Now(), time.Hour, pubPtr(t, f.pubs["B"]), rootEnv))
	forgedPath := writeEnvelope(t, f.path("forged.json"), forged)

	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"extra scope", base("A", "--scopes", "a,z,y", "--ttl-hours", "1"), []string{`"z", "y"`, "a, b, c", "subset"}},
		{"too-long ttl", base("A", "--scopes", "a", "--ttl-hours", "3"), []string{"after the parent grant expires", "longest --ttl-hours that fits now is 1.99"}},
		{"wrong key", base("P", "--scopes", "a", "--ttl-hours", "1"), []string{"is not the key the parent grant names", readKeyID(t, f.pubs["A"])}},
		{"another agent's key", base("B", "--scopes", "a", "--ttl-hours", "1"), []string{"is not the key the parent grant names"}},
		{"no agentKey", []string{"delegate", "--key", f.keys["A"], "--parent", noKey, "--agent", "B", "--scopes", "a", "--ttl-hours", "0.5", "--out", out}, []string{"names no agentKey", "--agent-key"}},
		{"expired parent", []string{"delegate", "--key", f.keys["A"], "--parent", expiredPath, "--agent", "B", "--scopes", "a", "--ttl-hours", "0.5", "--out", out}, []string{"expired at"}},
		{"broken parent chain", []string{"delegate", "--key", f.keys["B"], "--parent", forgedPath, "--agent", "C", "--scopes", "a", "--ttl-hours", "0.1", "--out", out}, []string{"does not verify"}},
		{"parent not a grant", []string{"delegate", "--key", f.keys["A"], "--parent", f.pubs["A"], "--agent", "B", "--scopes", "a", "--ttl-hours", "0.1", "--out", out}, []string{"not a grant envelope"}},
	}
	for _, c := range cases {
		code, stdout, errOut := runSvc(t, c.args...)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s%s", c.name, code, stdout, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", c.name, w, errOut)
			}
		}
		assertNoFile(t, out)
	}

	// The ttl the refusal suggests does fit.
	_, _, errOut := runSvc(t, base("A", "--scopes", "a", "--ttl-hours", "3")...)
	m := regexp.MustCompile(`fits now is ([0-9.]+)`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("no suggested ttl in %q", errOut)
	}
	mustRun(t, base("A", "--scopes", "a", "--ttl-hours", m[1])...)
	if c := f.verify(t, out); c.Depth() != 2 {
		t.Fatalf("depth %d", c.Depth())
	}
}

func TestDelegateUsage(t *testing.T) {
	f := newDelegateFixture(t)
	out := f.path("sub.json")
	full := []string{"--key", f.keys["A"], "--parent", f.root, "--agent", "B", "--scopes", "a", "--ttl-hours", "1", "--out", out}
	for i := 0; i < len(full); i += 2 {
		args := append([]string{"delegate"}, slices.Delete(slices.Clone(full), i, i+2)...)
		if code, _, errOut := runSvc(t, args...); code != 2 || !strings.Contains(errOut, full[i]) {
			t.Errorf("without %s: exit %d, stderr %q; want 2 naming the flag", full[i], code, errOut)
		}
	}
	args := append([]string{"delegate"}, full...)
	args[len(args)-3] = "0" // --ttl-hours 0
	if code, _, _ := runSvc(t, args...); code != 2 {
		t.Errorf("--ttl-hours 0: exit %d, want 2", code)
	}
	assertNoFile(t, out)
}

func signGrant(t *testing.T, k *signer.Key, g *receipt.Grant) *receipt.Envelope {
	t.Helper()
	env, err := receipt.SignJSON(receipt.PayloadDelegation, g, k)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func writeEnvelope(t *testing.T, path string, env *receipt.Envelope) string {
	t.Helper()
	data, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func pubPtr(t *testing.T, path string) *signer.PublicKey {
	t.Helper()
	p, err := signer.LoadPublicKey(path)
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

func readKeyID(t *testing.T, pubPath string) string { return pubPtr(t, pubPath).KeyID }
