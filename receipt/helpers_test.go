package receipt_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// testKey returns a deterministic key for seed byte n, so tests stay fast and
// reproducible. Different n give different keys.
func testKey(t testing.TB, n byte) *signer.Key {
	t.Helper()
	k, err := signer.KeyFromSeed(bytes.Repeat([]byte{n}, 32))
	if err != nil {
		t.Fatalf("KeyFromSeed: %v", err)
	}
	return k
}

// sha256Hex is computed here with crypto/sha256, independently of the package.
func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// rfc6962LeafHash is SHA-256(0x00 || leaf), written out by hand.
func rfc6962LeafHash(leaf []byte) [32]byte {
	return sha256.Sum256(append([]byte{0x00}, leaf...))
}

// envelopeCanonicalByHand writes the RFC 8785 form of a DSSE envelope without
// using the package: keys in sorted order ("payload" < "payloadType" <
// "signatures", "keyid" < "sig"), no whitespace. Every value is base64, hex or
// a media type, none of which needs escaping.
func envelopeCanonicalByHand(e *receipt.Envelope) []byte {
	sigs := make([]string, 0, len(e.Signatures))
	for _, s := range e.Signatures {
		sigs = append(sigs, fmt.Sprintf(`{"keyid":%q,"sig":%q}`, s.KeyID, base64.StdEncoding.EncodeToString(s.Sig)))
	}
	return fmt.Appendf(nil, `{"payload":%q,"payloadType":%q,"signatures":[%s]}`,
		base64.StdEncoding.EncodeToString(e.Payload), e.PayloadType, strings.Join(sigs, ","))
}

// baseTime is the fixed "now" of the tests: 2026-11-22T00:00:00Z.
var baseTime = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

// timeAt is baseTime plus ms milliseconds.
func timeAt(ms int64) time.Time { return baseTime.Add(time.Duration(ms) * time.Millisecond) }
