package receipt

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Canonical returns the RFC 8785 canonical JSON encoding of v: v is marshalled with
// encoding/json (so struct tags decide which fields are present) and the result is
// transformed by transformJCS.
func Canonical(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return CanonicalizeJSON(raw)
}

// CanonicalizeJSON transforms any JSON text into its RFC 8785 canonical form. It fails
// on invalid JSON, on duplicate keys and on numbers outside I-JSON.
func CanonicalizeJSON(raw []byte) ([]byte, error) {
	out, err := transformJCS(raw)
	if err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return out, nil
}

// Digest is SPEC.md's digest of a value: the hex SHA-256 of its canonical JSON.
func Digest(v any) (string, error) {
	c, err := Canonical(v)
	if err != nil {
		return "", err
	}
	return sha256Hex(c), nil
}

// DigestJSON is Digest of a value given as JSON text.
func DigestJSON(raw []byte) (string, error) {
	c, err := CanonicalizeJSON(raw)
	if err != nil {
		return "", err
	}
	return sha256Hex(c), nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// IsDigestHex reports whether s is a SHA-256 digest in the form this package writes
// every digest (Digest, a tree head's rootHash, a tool definition's): 64 lowercase
// hexadecimal digits.
func IsDigestHex(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
