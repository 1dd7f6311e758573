package signer

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// MaxKeyFileSize caps what LoadPrivateKey and LoadPublicKey read: a PEM key is a few
// hundred bytes, so anything larger is not a key file.
const MaxKeyFileSize = 64 << 10

// Key is an Ed25519 private key with its keyid. The private half never leaves the
// process that loaded it: Key has no method that returns it in serialised form
// other than WritePrivateKeyFile.
type Key struct {
	priv  ed25519.PrivateKey
	pub   ed25519.PublicKey
	keyID string
}

// PublicKey is an Ed25519 public key with its keyid.
type PublicKey struct {
	Key   ed25519.PublicKey
	KeyID string
}

// NewKey wraps an Ed25519 private key.
func NewKey(priv ed25519.PrivateKey) (*Key, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("signer: ed25519 private key has %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	pub := priv.Public().(ed25519.PublicKey)
	id, err := KeyID(pub)
	if err != nil {
		return nil, err
	}
	return &Key{priv: priv, pub: pub, keyID: id}, nil
}

// GenerateKey makes a fresh key from crypto/rand.
func GenerateKey() (*Key, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return NewKey(priv)
}

// KeyFromSeed makes the key for a 32-byte seed. It exists for deterministic test
// vectors; real keys come from GenerateKey.
func KeyFromSeed(seed []byte) (*Key, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("signer: seed has %d bytes, want %d", len(seed), ed25519.SeedSize)
	}
	return NewKey(ed25519.NewKeyFromSeed(seed))
}

// KeyID is the hex SHA-256 of the key's SPKI DER encoding.
func (k *Key) KeyID() string { return k.keyID }

// Public returns the public half.
func (k *Key) Public() PublicKey { return PublicKey{Key: k.pub, KeyID: k.keyID} }

// Sign signs msg (for DSSE, the pre-authentication encoding).
func (k *Key) Sign(msg []byte) []byte { return ed25519.Sign(k.priv, msg) }

// KeyID returns the hex SHA-256 of the SPKI DER encoding of pub.
func KeyID(pub ed25519.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("signer: encode public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// Verify reports whether sig is pub's signature of msg.
func (p PublicKey) Verify(msg, sig []byte) bool {
	return len(p.Key) == ed25519.PublicKeySize && ed25519.Verify(p.Key, msg, sig)
}

// PEM returns the SPKI PEM "PUBLIC KEY" encoding.
func (p PublicKey) PEM() string {
	der, err := x509.MarshalPKIXPublicKey(p.Key)
	if err != nil {
		panic(err) // an ed25519.PublicKey always marshals
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// ParsePublicKeyPEM parses an SPKI PEM "PUBLIC KEY" holding an Ed25519 key.
func ParsePublicKeyPEM(data []byte) (PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return PublicKey{}, errors.New("signer: no PEM block found; want a PUBLIC KEY block")
	}
	if block.Type != "PUBLIC KEY" {
		return PublicKey{}, fmt.Errorf("signer: PEM block is %q; want PUBLIC KEY (a .pub file)", block.Type)
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return PublicKey{}, fmt.Errorf("signer: parse public key: %w", err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return PublicKey{}, fmt.Errorf("signer: public key is %T; only ed25519 is supported", k)
	}
	id, err := KeyID(pub)
	if err != nil {
		return PublicKey{}, err
	}
	return PublicKey{Key: pub, KeyID: id}, nil
}

// ParsePrivateKeyPEM parses a PKCS#8 PEM "PRIVATE KEY" holding an Ed25519 key.
func ParsePrivateKeyPEM(data []byte) (*Key, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("signer: no PEM block found; want a PRIVATE KEY block")
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("signer: PEM block is %q; want PRIVATE KEY (a .key file)", block.Type)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signer: parse private key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("signer: private key is %T; only ed25519 is supported", k)
	}
	return NewKey(priv)
}

// LoadPrivateKey reads a <name>.key file.
func LoadPrivateKey(path string) (*Key, error) {
	data, err := readCapped(path)
	if err != nil {
		return nil, err
	}
	k, err := ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// LoadPublicKey reads a <name>.pub file.
func LoadPublicKey(path string) (PublicKey, error) {
	data, err := readCapped(path)
	if err != nil {
		return PublicKey{}, err
	}
	p, err := ParsePublicKeyPEM(data)
	if err != nil {
		return PublicKey{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// LoadPublicKeys reads several .pub files, in order.
func LoadPublicKeys(paths []string) ([]PublicKey, error) {
	out := make([]PublicKey, 0, len(paths))
	for _, p := range paths {
		k, err := LoadPublicKey(p)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxKeyFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxKeyFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes; not a key file", path, MaxKeyFileSize)
	}
	return data, nil
}

// PrivatePEM returns the PKCS#8 PEM encoding of the private key.
func (k *Key) PrivatePEM() []byte {
	der, err := x509.MarshalPKCS8PrivateKey(k.priv)
	if err != nil {
		panic(err) // an ed25519.PrivateKey always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// WriteKeyFiles writes <dir>/<name>.key (0600) and <dir>/<name>.pub (0644). It refuses
// to overwrite either file, so a typo cannot destroy a signing key or detach a key from
// its public half; both are created exclusively and fsynced.
func (k *Key) WriteKeyFiles(dir, name string) (keyPath, pubPath string, err error) {
	if name == "" || filepath.Base(name) != name {
		return "", "", fmt.Errorf("signer: key name %q must be a plain file name", name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	keyPath = filepath.Join(dir, name+".key")
	pubPath = filepath.Join(dir, name+".pub")
	for _, p := range []string{keyPath, pubPath} {
		if _, err := os.Lstat(p); err == nil {
			return "", "", fmt.Errorf("signer: %s exists; remove it or pick another name", p)
		}
	}
	if err := writeExclusive(keyPath, k.PrivatePEM(), 0o600); err != nil {
		return "", "", err
	}
	if err := writeExclusive(pubPath, []byte(k.Public().PEM()), 0o644); err != nil {
		os.Remove(keyPath) // never leave a private key without its public half
		return "", "", err
	}
	return keyPath, pubPath, nil
}

func writeExclusive(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("signer: %s exists; remove it or pick another name", path)
		}
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}
