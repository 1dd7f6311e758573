package signer_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"svc.dev/svc/signer"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// RFC 8032 section 7.1, TEST 1 (empty message).
func TestRFC8032Vector(t *testing.T) {
	seed := mustHex(t, "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
	wantPub := mustHex(t, "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
	wantSig := mustHex(t, "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
	k, err := signer.KeyFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k.Public().Key, wantPub) {
		t.Errorf("public key = %x", k.Public().Key)
	}
	if sig := k.Sign(nil); !bytes.Equal(sig, wantSig) {
		t.Errorf("signature = %x", sig)
	}
	if !k.Public().Verify(nil, wantSig) || k.Public().Verify([]byte("x"), wantSig) {
		t.Error("Verify")
	}
	// keyid: hex SHA-256 of the SPKI DER. For Ed25519 the DER is the fixed
	// 12-byte header 302a300506032b6570032100 followed by the 32-byte key.
	spki := append(mustHex(t, "302a300506032b6570032100"), wantPub...)
	sum := sha256.Sum256(spki)
	if want := hex.EncodeToString(sum[:]); k.KeyID() != want || k.Public().KeyID != want {
		t.Errorf("keyid = %s, want %s", k.KeyID(), want)
	}
}

func TestKeyIDIsSHA256OfSPKI(t *testing.T) {
	for range 5 {
		k, err := signer.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKIXPublicKey(k.Public().Key)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(der)
		want := hex.EncodeToString(sum[:])
		if k.KeyID() != want {
			t.Errorf("KeyID = %s, want %s", k.KeyID(), want)
		}
		id, err := signer.KeyID(k.Public().Key)
		if err != nil || id != want {
			t.Errorf("signer.KeyID = %s, %v", id, err)
		}
		// go-securesystemslib's dsse.SHA256KeyID is a different scheme (the
		// OpenSSH "SHA256:<base64>" fingerprint of the SSH wire encoding), so it
		// never equals SPEC.md's keyid: a stock go-securesystemslib verifier must
		// be given the keyid by its Verifier.KeyID (see receipt's DSSE tests).
		ssh, err := dsse.SHA256KeyID(k.Public().Key)
		if err != nil {
			t.Fatal(err)
		}
		if ssh == want || !strings.HasPrefix(ssh, "SHA256:") {
			t.Errorf("dsse.SHA256KeyID = %s", ssh)
		}
	}
}

func TestNewKeyAndSeedSizes(t *testing.T) {
	if _, err := signer.NewKey(make([]byte, 31)); err == nil {
		t.Error("NewKey accepted 31 bytes")
	}
	if _, err := signer.KeyFromSeed(make([]byte, 64)); err == nil {
		t.Error("KeyFromSeed accepted 64 bytes")
	}
	a, _ := signer.GenerateKey()
	b, _ := signer.GenerateKey()
	if a.KeyID() == b.KeyID() {
		t.Error("two generated keys share a keyid")
	}
	// A public key of the wrong length never verifies and never panics.
	bad := signer.PublicKey{Key: make([]byte, 10)}
	if bad.Verify([]byte("m"), make([]byte, 64)) {
		t.Error("short key verified")
	}
	if a.Public().Verify([]byte("m"), b.Sign([]byte("m"))) {
		t.Error("signature by another key verified")
	}
	if a.Public().Verify([]byte("m"), a.Sign([]byte("m"))[:63]) {
		t.Error("truncated signature verified")
	}
}

func TestWriteKeyFilesAndLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys") // created by WriteKeyFiles
	k, err := signer.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	keyPath, pubPath, err := k.WriteKeyFiles(dir, "issuer")
	if err != nil {
		t.Fatal(err)
	}
	if keyPath != filepath.Join(dir, "issuer.key") || pubPath != filepath.Join(dir, "issuer.pub") {
		t.Errorf("paths = %s %s", keyPath, pubPath)
	}
	st, err := os.Stat(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf(".key mode = %o, want 600", st.Mode().Perm())
	}

	// The files are standard PEM, checked with the standard library.
	keyPEM, _ := os.ReadFile(keyPath)
	block, rest := pem.Decode(keyPEM)
	if block == nil || block.Type != "PRIVATE KEY" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf(".key is not one PRIVATE KEY block:\n%s", keyPEM)
	}
	priv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatalf(".key is not PKCS#8: %v", err)
	}
	if edPriv, ok := priv.(ed25519.PrivateKey); !ok || !bytes.Equal(edPriv.Public().(ed25519.PublicKey), k.Public().Key) {
		t.Error(".key holds another key")
	}
	pubPEM, _ := os.ReadFile(pubPath)
	block, _ = pem.Decode(pubPEM)
	if block == nil || block.Type != "PUBLIC KEY" {
		t.Fatalf(".pub is not a PUBLIC KEY block:\n%s", pubPEM)
	}
	pk, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if edPub, ok := pk.(ed25519.PublicKey); !ok || !bytes.Equal(edPub, k.Public().Key) {
		t.Error(".pub holds another key")
	}
	if string(pubPEM) != k.Public().PEM() {
		t.Error(".pub differs from PublicKey.PEM")
	}
	if !bytes.Equal(keyPEM, k.PrivatePEM()) {
		t.Error(".key differs from PrivatePEM")
	}

	// Load round trip.
	k2, err := signer.LoadPrivateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if k2.KeyID() != k.KeyID() || !bytes.Equal(k2.Sign([]byte("m")), k.Sign([]byte("m"))) {
		t.Error("loaded private key differs")
	}
	p2, err := signer.LoadPublicKey(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	if p2.KeyID != k.KeyID() || !bytes.Equal(p2.Key, k.Public().Key) {
		t.Error("loaded public key differs")
	}
	other, _ := signer.GenerateKey()
	_, otherPub, err := other.WriteKeyFiles(dir, "other")
	if err != nil {
		t.Fatal(err)
	}
	all, err := signer.LoadPublicKeys([]string{otherPub, pubPath})
	if err != nil || len(all) != 2 || all[0].KeyID != other.KeyID() || all[1].KeyID != k.KeyID() {
		t.Errorf("LoadPublicKeys = %v, %v", all, err)
	}
	if _, err := signer.LoadPublicKeys([]string{pubPath, filepath.Join(dir, "missing.pub")}); err == nil {
		t.Error("LoadPublicKeys ignored a missing file")
	}
	if _, err := signer.LoadPublicKey(keyPath); err == nil {
		t.Error("LoadPublicKey accepted a .key file")
	}
	if _, err := signer.LoadPrivateKey(pubPath); err == nil {
		t.Error("LoadPrivateKey accepted a .pub file")
	}

	// Refuses to overwrite an existing private key, and leaves it intact.
	k3, _ := signer.GenerateKey()
	if _, _, err := k3.WriteKeyFiles(dir, "issuer"); err == nil {
		t.Error("WriteKeyFiles overwrote an existing key")
	} else if !strings.Contains(err.Error(), "exists") {
		t.Errorf("overwrite error does not say the key exists: %v", err)
	}
	if after, _ := os.ReadFile(keyPath); !bytes.Equal(after, keyPEM) {
		t.Error("existing .key was modified")
	}
	if after, _ := os.ReadFile(pubPath); !bytes.Equal(after, pubPEM) {
		t.Error("existing .pub was modified by a refused write")
	}
	for _, name := range []string{"", "a/b", "../x", "sub/"} {
		if _, _, err := k3.WriteKeyFiles(dir, name); err == nil {
			t.Errorf("WriteKeyFiles accepted name %q", name)
		}
	}
}

func TestLoadRefusesHugeFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.key")
	k, _ := signer.GenerateKey()
	data := append(k.PrivatePEM(), bytes.Repeat([]byte("\n"), signer.MaxKeyFileSize)...)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := signer.LoadPrivateKey(p); err == nil {
		t.Error("a key file over MaxKeyFileSize was read")
	}
	if _, err := signer.LoadPrivateKey(filepath.Join(t.TempDir(), "none.key")); err == nil {
		t.Error("a missing key file was read")
	}
}

func TestParsePrivateKeyPEMRefusals(t *testing.T) {
	k, _ := signer.GenerateKey()
	if _, err := signer.ParsePrivateKeyPEM([]byte(k.Public().PEM())); err == nil {
		t.Error("accepted a PUBLIC KEY block")
	} else if !strings.Contains(err.Error(), "PUBLIC KEY") || !strings.Contains(err.Error(), "PRIVATE KEY") {
		t.Errorf("error does not name the block types: %v", err)
	}

	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	ecPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if _, err := signer.ParsePrivateKeyPEM(ecPEM); err == nil {
		t.Error("accepted an ECDSA key")
	} else if !strings.Contains(err.Error(), "ed25519") {
		t.Errorf("error does not say only ed25519 is supported: %v", err)
	}
	ecPubDER, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	ecPubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecPubDER})
	if _, err := signer.ParsePublicKeyPEM(ecPubPEM); err == nil {
		t.Error("ParsePublicKeyPEM accepted an ECDSA key")
	} else if !strings.Contains(err.Error(), "ed25519") {
		t.Errorf("error does not say only ed25519 is supported: %v", err)
	}

	// A PKCS#1 "RSA PRIVATE KEY" or SEC 1 "EC PRIVATE KEY" block is the wrong type.
	ecSEC1, _ := x509.MarshalECPrivateKey(ec)
	if _, err := signer.ParsePrivateKeyPEM(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecSEC1})); err == nil {
		t.Error("accepted an EC PRIVATE KEY block")
	}
	rk, err := rsa.GenerateKey(rand.Reader, 1024)
	if err == nil {
		der, _ := x509.MarshalPKCS8PrivateKey(rk)
		if _, err := signer.ParsePrivateKeyPEM(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err == nil ||
			!strings.Contains(err.Error(), "ed25519") {
			t.Errorf("RSA key: %v", err)
		}
	}
	for name, in := range map[string]string{
		"empty":          "",
		"not PEM":        "hello",
		"garbage DER":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}})),
		"truncated PEM":  string(k.PrivatePEM()[:40]),
		"raw seed bytes": string(bytes.Repeat([]byte{1}, 32)),
	} {
		if _, err := signer.ParsePrivateKeyPEM([]byte(in)); err == nil {
			t.Errorf("ParsePrivateKeyPEM accepted %s", name)
		}
		if _, err := signer.ParsePublicKeyPEM([]byte(in)); err == nil {
			t.Errorf("ParsePublicKeyPEM accepted %s", name)
		}
	}
	if _, err := signer.ParsePublicKeyPEM(k.PrivatePEM()); err == nil {
		t.Error("ParsePublicKeyPEM accepted a PRIVATE KEY block")
	}
}

func TestFormatTime(t *testing.T) {
	at := time.Date(2026, 11, 22, 3, 2, 3, 456789000, time.FixedZone("CET", 2*3600))
	if got := signer.FormatTime(at); got != "2026-11-22T01:02:03.456Z" {
		t.Errorf("FormatTime = %s", got)
	}
	if got := signer.FormatTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); got != "2026-01-01T00:00:00.000Z" {
		t.Errorf("FormatTime = %s", got)
	}
}

// An existing .pub alone also stops WriteKeyFiles, and no .key is left behind.
func TestWriteKeyFilesRefusesExistingPub(t *testing.T) {
	dir := t.TempDir()
	pubPath := filepath.Join(dir, "k.pub")
	if err := os.WriteFile(pubPath, []byte("someone else's key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k, _ := signer.GenerateKey()
	if _, _, err := k.WriteKeyFiles(dir, "k"); err == nil {
		t.Fatal("WriteKeyFiles overwrote an existing .pub")
	}
	if _, err := os.Stat(filepath.Join(dir, "k.key")); !os.IsNotExist(err) {
		t.Errorf("a .key was left without its .pub: %v", err)
	}
	if data, _ := os.ReadFile(pubPath); string(data) != "someone else's key\n" {
		t.Error("existing .pub modified")
	}
}
