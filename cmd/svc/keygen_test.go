package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeygenWritesKeyPair(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys") // created by keygen
	out := mustRun(t, "keygen", "--dir", dir, "--name", "principal")
	keyPath := filepath.Join(dir, "principal.key")
	pubPath := filepath.Join(dir, "principal.pub")

	ki, err := os.Stat(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if ki.Mode().Perm() != 0o600 {
		t.Errorf("%s mode %v, want 0600", keyPath, ki.Mode().Perm())
	}
	pi, err := os.Stat(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	if p := pi.Mode().Perm(); p&0o400 == 0 || p&0o022 != 0 {
		t.Errorf("%s mode %v, want owner-readable and writable by the owner only", pubPath, p)
	}

	// Independently: the .pub is SPKI PEM of an Ed25519 key, the .key PKCS#8 PEM of
	// its private half, and the keyid is the SHA-256 of the SPKI DER.
	pubPEM, _ := os.ReadFile(pubPath)
	block, rest := pem.Decode(pubPEM)
	if block == nil || block.Type != "PUBLIC KEY" || len(strings.TrimSpace(string(rest))) != 0 {
		t.Fatalf("%s is not one PUBLIC KEY PEM block:\n%s", pubPath, pubPEM)
	}
	pk, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pub, ok := pk.(ed25519.PublicKey)
	if !ok {
		t.Fatalf("public key is %T", pk)
	}
	sum := sha256.Sum256(block.Bytes)
	wantID := hex.EncodeToString(sum[:])

	keyPEM, _ := os.ReadFile(keyPath)
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		t.Fatalf("%s is not a PRIVATE KEY PEM block", keyPath)
	}
	sk, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	priv, ok := sk.(ed25519.PrivateKey)
	if !ok {
		t.Fatalf("private key is %T", sk)
	}
	if !pub.Equal(priv.Public()) {
		t.Fatal("the .pub is not the public half of the .key")
	}

	for _, want := range []string{"keyid        " + wantID + "\n", keyPath, pubPath} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestKeygenRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, "keygen", "--dir", dir, "--name", "k")
	keyPath := filepath.Join(dir, "k.key")
	pubPath := filepath.Join(dir, "k.pub")
	key1, _ := os.ReadFile(keyPath)
	pub1, _ := os.ReadFile(pubPath)

	code, _, errOut := runSvc(t, "keygen", "--dir", dir, "--name", "k")
	if code != 1 || !strings.Contains(errOut, "refusing to overwrite") {
		t.Fatalf("second keygen: exit %d, stderr %q; want exit 1 and a refusal", code, errOut)
	}
	key2, _ := os.ReadFile(keyPath)
	pub2, _ := os.ReadFile(pubPath)
	if string(key1) != string(key2) || string(pub1) != string(pub2) {
		t.Fatal("the key files changed")
	}

	// A lone .pub is not overwritten either, and no .key is created beside it.
	if err := os.WriteFile(filepath.Join(dir, "lone.pub"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := runSvc(t, "keygen", "--dir", dir, "--name", "lone"); code != 1 {
		t.Fatalf("keygen over a lone .pub: exit %d, want 1", code)
	}
	assertNoFile(t, filepath.Join(dir, "lone.key"))
	if b, _ := os.ReadFile(filepath.Join(dir, "lone.pub")); string(b) != "mine" {
		t.Fatal("lone.pub was overwritten")
	}
}

func TestKeygenUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"keygen", "--dir", dir},
		{"keygen", "--dir", dir, "--name", "a/b"},
		{"keygen", "--dir", dir, "--name", ".."},
		{"keygen", "--dir", "", "--name", "k"},
	} {
		if code, _, errOut := runSvc(t, args...); code != 2 {
			t.Errorf("svc %v: exit %d, want 2 (stderr %s)", args, code, errOut)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("usage errors wrote files: %v", ents)
	}
}
