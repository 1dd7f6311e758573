package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func TestGrantSignsVerifiableGrant(t *testing.T) {
	dir := t.TempDir()
	pk, pkPath, _ := testKey(t, dir, "principal")
	ak, _, akPub := testKey(t, dir, "agent")
	out := filepath.Join(dir, "grant.json")

	before := time.Now().Add(-time.Millisecond)
	stdout := mustRun(t, "grant", "--key", pkPath, "--principal", "alice@example.com", "--agent", "billing-bot",
		"--scopes", " get_invoice, refund ,,get_invoice", "--ttl-hours", "0.5", "--out", out, "--agent-key", akPub)
	after := time.Now()

	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("grant file mode %v, want 0600", fi.Mode().Perm())
	}
	env := readEnvelope(t, out)
	if env.PayloadType != receipt.PayloadDelegation {
		t.Fatalf("payloadType %q", env.PayloadType)
	}
	chain, key, err := receipt.VerifyGrant(env, []signer.PublicKey{pk.Public()}, time.Now())
	if err != nil {
		t.Fatalf("VerifyGrant: %v", err)
	}
	if key.KeyID != pk.KeyID() || chain.Depth() != 1 {
		t.Fatalf("verified by %s at depth %d", key.KeyID, chain.Depth())
	}
	g := chain.Leaf()
	if g.Version != receipt.GrantVersion || g.Principal != "alice@example.com" || g.Agent != "billing-bot" || g.Parent != nil {
		t.Fatalf("grant %+v", g)
	}
	if !slices.Equal(g.Scopes, []string{"get_invoice", "refund"}) {
		t.Fatalf("scopes %q, want [get_invoice refund]", g.Scopes)
	}
	if g.AgentKey != ak.Public().PEM() {
		t.Fatalf("agentKey %q, want the agent's public key", g.AgentKey)
	}
	from, to, err := g.Window()
	if err != nil {
		t.Fatal(err)
	}
	if from.Before(before.Truncate(time.Millisecond)) || from.After(after) {
		t.Fatalf("issuedAt %s is not the signing time (%s .. %s)", g.IssuedAt, before, after)
	}
	if to.Sub(from) != 30*time.Minute {
		t.Fatalf("window %s .. %s is not 0.5 hours", g.IssuedAt, g.ExpiresAt)
	}
	if g.IssuedAt != receipt.FormatTime(from) || !strings.HasSuffix(g.ExpiresAt, "Z") {
		t.Fatalf("timestamps not written as RFC 3339 UTC milliseconds: %s, %s", g.IssuedAt, g.ExpiresAt)
	}
	// The payload is the canonical JSON of the grant.
	if c, _ := receipt.Canonical(g); !bytes.Equal(c, env.Payload) {
		t.Fatalf("payload is not canonical JSON:\n%s\n%s", env.Payload, c)
	}
	if len(env.Signatures) != 1 || env.Signatures[0].KeyID != pk.KeyID() {
		t.Fatalf("signatures %+v", env.Signatures)
	}
	// It does not verify against another key, nor outside its window.
	if _, _, err := receipt.VerifyGrant(env, []signer.PublicKey{ak.Public()}, time.Now()); !errors.Is(err, receipt.ErrGrantUntrusted) {
		t.Fatalf("VerifyGrant with the agent's key: %v", err)
	}
	if _, _, err := receipt.VerifyGrant(env, []signer.PublicKey{pk.Public()}, to.Add(time.Second)); !errors.Is(err, receipt.ErrGrantWindow) {
		t.Fatalf("VerifyGrant after expiry: %v", err)
	}
	for _, want := range []string{"alice@example.com", "billing-bot", "get_invoice, refund", g.IssuedAt, g.ExpiresAt, pk.KeyID(), ak.KeyID(), out} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
}

func TestGrantWithoutAgentKey(t *testing.T) {
	dir := t.TempDir()
	pk, pkPath, _ := testKey(t, dir, "p")
	out := filepath.Join(dir, "g.json")
	stdout := mustRun(t, "grant", "--key", pkPath, "--principal", "p", "--agent", "a", "--scopes", "x", "--ttl-hours", "2", "--out", out)
	c, _, err := receipt.VerifyGrant(readEnvelope(t, out), []signer.PublicKey{pk.Public()}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c.Leaf().AgentKey != "" {
		t.Fatal("agentKey set without --agent-key")
	}
	if !strings.Contains(stdout, "cannot delegate") {
		t.Errorf("summary does not say the agent cannot delegate:\n%s", stdout)
	}
}

func TestGrantRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	_, pkPath, pubPath := testKey(t, dir, "p")
	out := filepath.Join(dir, "g.json")
	good := map[string]string{"--key": pkPath, "--principal": "p", "--agent": "a", "--scopes": "x", "--ttl-hours": "1", "--out": out}
	with := func(flag, value string) []string {
		args := []string{"grant"}
		for _, f := range []string{"--key", "--principal", "--agent", "--scopes", "--ttl-hours", "--out"} {
			v := good[f]
			if f == flag {
				v = value
			}
			args = append(args, f, v)
		}
		if _, ok := good[flag]; !ok {
			args = append(args, flag, value)
		}
		return args
	}
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{with("--scopes", " , ,"), 2, "--scopes"},
		{with("--scopes", ""), 2, "--scopes"},
		{with("--ttl-hours", "0"), 2, "--ttl-hours"},
		{with("--ttl-hours", "-1"), 2, "--ttl-hours"},
		{with("--ttl-hours", "NaN"), 2, "--ttl-hours"},
		{with("--ttl-hours", "1e12"), 2, "--ttl-hours"},
		{with("--ttl-hours", "soon"), 2, "ttl-hours"},
		{with("--principal", "  "), 2, "--principal"},
		{with("--agent", ""), 2, "--agent"},
		{with("--key", ""), 2, "--key"},
		{with("--key", pubPath), 1, "PRIVATE KEY"},
		{with("--key", filepath.Join(dir, "missing.key")), 1, "--key"},
		{with("--agent-key", pkPath), 1, "PUBLIC KEY"},
	}
	for _, c := range cases {
		code, _, errOut := runSvc(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("svc %v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errOut, c.code, c.msg)
		}
		assertNoFile(t, out)
	}
	// --out is required.
	if code, _, _ := runSvc(t, "grant", "--key", pkPath, "--principal", "p", "--agent", "a", "--scopes", "x", "--ttl-hours", "1"); code != 2 {
		t.Errorf("missing --out: exit %d, want 2", code)
	}
}
