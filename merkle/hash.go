package merkle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// HashSize is the size of a Hash in bytes.
const HashSize = sha256.Size

// A Hash is a SHA-256 hash: a leaf hash, an interior node hash or a root.
// Its text form (String, MarshalText) is 64 lowercase hexadecimal digits, so
// encoding/json writes it as a hex string.
type Hash [HashSize]byte

// EmptyRoot is the root of the empty tree: SHA-256 of the empty string
// (RFC 6962 section 2.1). Do not modify it.
var EmptyRoot = Hash(sha256.Sum256(nil))

// Domain separation prefixes of RFC 6962 section 2.1.
const (
	leafPrefix = 0x00
	nodePrefix = 0x01
)

// String returns h as 64 lowercase hexadecimal digits.
func (h Hash) String() string {
	return hex.EncodeToString(h[:])
}

// MarshalText implements encoding.TextMarshaler: the String form.
func (h Hash) MarshalText() ([]byte, error) {
	b := make([]byte, 2*HashSize)
	hex.Encode(b, h[:])
	return b, nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseHash.
func (h *Hash) UnmarshalText(text []byte) error {
	p, err := ParseHash(string(text))
	if err != nil {
		return err
	}
	*h = p
	return nil
}

// ParseHash parses exactly 64 hexadecimal digits, lower or upper case, with
// nothing around them. Errors wrap ErrMalformedHash.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*HashSize {
		return h, fmt.Errorf("%w: %d characters, want %d", ErrMalformedHash, len(s), 2*HashSize)
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return Hash{}, fmt.Errorf("%w: %v", ErrMalformedHash, err)
	}
	return h, nil
}

// LeafHash returns the RFC 6962 leaf hash SHA-256(0x00 || data).
func LeafHash(data []byte) Hash {
	var buf [256]byte
	if len(data) < len(buf) {
		// Small leaves (hashes, short records) need no allocation.
		buf[0] = leafPrefix
		n := copy(buf[1:], data)
		return sha256.Sum256(buf[:1+n])
	}
	d := sha256.New()
	d.Write([]byte{leafPrefix})
	d.Write(data)
	var h Hash
	d.Sum(h[:0])
	return h
}

// NodeHash returns the RFC 6962 interior node hash
// SHA-256(0x01 || left || right).
func NodeHash(left, right Hash) Hash {
	var buf [1 + 2*HashSize]byte
	buf[0] = nodePrefix
	copy(buf[1:], left[:])
	copy(buf[1+HashSize:], right[:])
	return sha256.Sum256(buf[:])
}
