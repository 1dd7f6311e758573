package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
)

const signerTokenEnv = "SVC_TEST_SIGNER_TOKEN"

// signerTestToken is the shared token of the running-signer tests.
const signerTestToken = "the-shared-signer-token-0123456789"

// signerTestKeys makes a directory holding the log's key and a retired one, and sets
// the token variable to signerTestToken.
func signerTestKeys(t *testing.T) (dir string, key *signer.Key, keyPath string, old *signer.Key, oldPub string) {
	t.Helper()
	dir = t.TempDir()
	key, keyPath, _ = testKey(t, dir, "log")
	old, _, oldPub = testKey(t, dir, "log-old")
	t.Setenv(signerTokenEnv, signerTestToken)
	return dir, key, keyPath, old, oldPub
}

// signerArgs is svc signer with a key file, a port the system chooses, a token
// variable and a state directory under dir, then extra.
func signerArgs(keyPath, dir, tokenEnv string, extra ...string) []string {
	return append([]string{"signer", "--key", keyPath, "--port", "0", "--token-env", tokenEnv, "--state-dir", filepath.Join(dir, "state")}, extra...)
}

func TestSignerHelpListsEveryFlag(t *testing.T) {
	code, out, errOut := runSvc(t, "signer", "--help")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	text := out + errOut
	for _, want := range []string{"Usage: svc signer", "Example:", "svc signer --key", "POST /sign", "GET  /keys"} {
		if !strings.Contains(text, want) {
			t.Errorf("help lacks %q:\n%s", want, text)
		}
	}
	for _, f := range []string{"key", "port", "host", "token-env", "retired-key", "log-id", "valid-from"} {
		if !strings.Contains(text, "\n  -"+f+" ") && !strings.Contains(text, "\n  -"+f+"\n") {
			t.Errorf("flag -%s not listed:\n%s", f, text)
		}
	}
	_, _, top := runSvc(t, "--help")
	if !strings.Contains(top, "  signer ") {
		t.Errorf("svc --help does not list signer:\n%s", top)
	}
}

func TestSignerUsageErrors(t *testing.T) {
	dir := t.TempDir()
	_, keyPath, _ := testKey(t, dir, "log")
	t.Setenv(signerTokenEnv, "a-signer-token-of-some-length")
	for name, args := range map[string][]string{
		"no --key":       {"signer", "--port", "0", "--token-env", signerTokenEnv, "--state-dir", filepath.Join(dir, "state")},
		"no --port":      {"signer", "--key", keyPath, "--token-env", signerTokenEnv, "--state-dir", filepath.Join(dir, "state")},
		"no --token-env": {"signer", "--key", keyPath, "--port", "0", "--state-dir", filepath.Join(dir, "state")},
		"no --state-dir": {"signer", "--key", keyPath, "--port", "0", "--token-env", signerTokenEnv},
		"bad port":       {"signer", "--key", keyPath, "--port", "70000", "--token-env", signerTokenEnv, "--state-dir", filepath.Join(dir, "state")},
		"extra argument": signerArgs(keyPath, dir, signerTokenEnv, "extra"),
		"bad valid-from": signerArgs(keyPath, dir, signerTokenEnv, "--valid-from", "monday"),
	} {
		if code, _, errOut := runSvc(t, args...); code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %s)", name, code, errOut)
		}
	}
}

// A token variable that is unset, empty or too weak stops startup with a message
// naming the variable, and the token never appears in the output.
func TestSignerTokenEnvMustBeSet(t *testing.T) {
	dir := t.TempDir()
	_, keyPath, _ := testKey(t, dir, "log")
	const unset = "SVC_TEST_SIGNER_TOKEN_NOT_SET"
	t.Setenv(unset, "x")
	os.Unsetenv(unset)
	code, out, errOut := runSvc(t, signerArgs(keyPath, dir, unset)...)
	if code != 1 || !strings.Contains(errOut, unset) || strings.Contains(out, "listening") {
		t.Errorf("unset variable: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	t.Setenv(signerTokenEnv, "")
	code, _, errOut = runSvc(t, signerArgs(keyPath, dir, signerTokenEnv)...)
	if code != 1 || !strings.Contains(errOut, signerTokenEnv) {
		t.Errorf("empty variable: exit %d, stderr %q", code, errOut)
	}
	t.Setenv(signerTokenEnv, "weak")
	code, _, errOut = runSvc(t, signerArgs(keyPath, dir, signerTokenEnv)...)
	if code != 1 || !strings.Contains(errOut, signerTokenEnv) || strings.Contains(errOut, "weak") {
		t.Errorf("weak token: exit %d, stderr %q", code, errOut)
	}
	// A missing key file fails too, after the token checks pass.
	t.Setenv(signerTokenEnv, "a-signer-token-of-some-length")
	if code, _, errOut := runSvc(t, signerArgs(filepath.Join(dir, "none.key"), dir, signerTokenEnv)...); code != 1 {
		t.Errorf("missing key: exit %d, stderr %q", code, errOut)
	}
}

// svc signer runs: it prints its keyid and address, signs through the client, serves
// its key document with the retired key, logs without the token, and stops on cancel.
func TestSignerRun(t *testing.T) {
	dir, key, keyPath, old, oldPub := signerTestKeys(t)
	const token = signerTestToken

	srv, addr := startBackground(t, `listening\s+(http://127\.0\.0\.1:[0-9]+)\n`, 10*time.Second, signerArgs(keyPath, dir, signerTokenEnv,
		"--retired-key", oldPub, "--log-id", "main", "--valid-from", "2026-05-01T00:00:00Z")...)
	stdout, stderr, ctx := &srv.stdout, &srv.stderr, context.Background()
	if !strings.Contains(stdout.String(), key.KeyID()) {
		t.Errorf("keyid not printed: %s", stdout.String())
	}
	if strings.HasSuffix(addr, ":0") {
		t.Errorf("printed the requested port, not the chosen one: %s", addr)
	}

	// No token, a body announced and never sent: 401 at once, connection closed.
	refusedAtOnce(t, strings.TrimPrefix(addr, "http://"), "/sign", "application/json", http.StatusUnauthorized)
	c, err := remote.NewClient(ctx, addr, token)
	if err != nil {
		t.Fatal(err)
	}
	if c.KeyID() != key.KeyID() {
		t.Errorf("client learned %s, want %s", c.KeyID(), key.KeyID())
	}
	head, err := receipt.SignTreeHeadWith(ctx, c, 3, strings.Repeat("cd", 32), time.Now(), "main")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := head.Verify([]signer.PublicKey{key.Public()}); err != nil {
		t.Errorf("head does not verify with the key file's public key: %v", err)
	}
	doc, err := c.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Log != "main" || len(doc.Keys) != 2 || doc.Keys[0].KeyID != key.KeyID() || doc.Keys[1].KeyID != old.KeyID() ||
		doc.Keys[0].ValidFrom != "2026-05-01T00:00:00.000Z" || doc.Keys[1].ValidTo != "2026-05-01T00:00:00.000Z" {
		t.Errorf("key document = %+v", doc)
	}
	// The wrong token is refused by the running service.
	bad, err := remote.NewClient(ctx, addr, "not-the-shared-token-000000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.SignEnvelope(ctx, receipt.PayloadTreeHead, head.Payload); err == nil {
		t.Error("wrong token signed")
	}

	srv.stop(t, 15*time.Second)
	logs := stderr.String()
	if strings.Contains(logs, token) || strings.Contains(stdout.String(), token) {
		t.Error("the token was printed or logged")
	}
	for _, want := range []string{`"path":"/sign"`, `"status":200`, `"status":401`, `"method":"POST"`, `"duration"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("stderr lacks %s:\n%s", want, logs)
		}
	}
}

// svc signer --start-head starts a log from a known signed head (one signed by a
// retired key here, as after a rotation): the first head asked for must extend it, so
// a rollback or another root at its size is refused from the start, while a head the
// state already has is not overwritten by a later --start-head.
func TestSignerStartHead(t *testing.T) {
	dir, _, keyPath, old, oldPub := signerTestKeys(t)
	const token = signerTestToken
	start, err := receipt.SignTreeHead(old, 8, strings.Repeat("cd", 32), time.Now(), "main")
	if err != nil {
		t.Fatal(err)
	}
	startFile := filepath.Join(dir, "head.json")
	data, _ := json.Marshal(map[string]any{"treeHead": start})
	if err := os.WriteFile(startFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, addr := startBackground(t, `listening\s+(http://127\.0\.0\.1:[0-9]+)\n`, 10*time.Second,
		signerArgs(keyPath, dir, signerTokenEnv, "--retired-key", oldPub, "--start-head", startFile)...)
	c, err := remote.NewClient(context.Background(), addr, token)
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]struct {
		size uint64
		root string
	}{"smaller": {5, strings.Repeat("cd", 32)}, "another root at size 8": {8, strings.Repeat("ab", 32)}} {
		if _, err := receipt.SignTreeHeadWith(context.Background(), c, h.size, h.root, time.Now(), "main"); !errors.Is(err, remote.ErrConflict) {
			t.Errorf("%s: %v, want ErrConflict", name, err)
		}
	}
	if _, err := receipt.SignTreeHeadWith(context.Background(), c, 8, strings.Repeat("cd", 32), time.Now(), "main"); err != nil {
		t.Errorf("the start head itself: %v", err)
	}
	srv.stop(t, 15*time.Second)
	// A start head that does not verify stops the signer.
	other, _, _ := testKey(t, dir, "stranger")
	forged, _ := receipt.SignTreeHead(other, 2, strings.Repeat("ef", 32), time.Now(), "main")
	data, _ = json.Marshal(forged)
	os.WriteFile(startFile, data, 0o600)
	if code, _, errOut := runSvc(t, signerArgs(keyPath, dir, signerTokenEnv, "--start-head", startFile)...); code != 1 || !strings.Contains(errOut, "does not verify") {
		t.Errorf("a start head signed by an unknown key: exit %d, %s", code, errOut)
	}
}
