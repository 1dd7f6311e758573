package receipt

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCanonicalBundleMatchesCanonical: the direct writer gives what Canonical gives,
// for every bundle of the conformance vectors and for edge cases of the inclusion.
func TestCanonicalBundleMatchesCanonical(t *testing.T) {
	files, err := filepath.Glob("../conformance/vectors/cases/*.json")
	if err != nil || len(files) < 20 {
		t.Fatalf("vectors: %d files, %v", len(files), err)
	}
	var bundles []*Bundle
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ParseBundle(data)
		if err != nil {
			continue // a tampered vector that does not parse
		}
		bundles = append(bundles, b)
	}
	if len(bundles) < 20 {
		t.Fatalf("only %d bundles parsed", len(bundles))
	}
	edge := *bundles[0]
	edge.Inclusion = Inclusion{LeafIndex: maxExactInt - 1, TreeSize: maxExactInt - 1, Hashes: []string{}}
	nilHashes := *bundles[0]
	nilHashes.Inclusion.Hashes = nil
	escaped := *bundles[0]
	escaped.Inclusion.Hashes = []string{"a\"b\\c\u0001"}
	bundles = append(bundles, &edge, &nilHashes, &escaped)
	for i, b := range bundles {
		want, err := Canonical(b)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendCanonicalBundle(nil, b)
		if !ok {
			if i < len(bundles)-1 {
				t.Errorf("bundle %d: the direct writer declined", i)
			}
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("bundle %d:\n got %s\nwant %s", i, got, want)
		}
	}
	big := *bundles[0]
	big.Inclusion.TreeSize = maxExactInt
	if _, ok := appendCanonicalBundle(nil, &big); ok {
		t.Error("a tree size of 2^53 was written directly")
	}
}

// FuzzBase64Plain: the fast path of Base64.UnmarshalJSON (a string of base64
// characters only) accepts and refuses exactly what the general path does, with the
// same bytes.
func FuzzBase64Plain(f *testing.F) {
	for _, s := range []string{`"QQ=="`, `"QQ="`, `"QR=="`, `"QUJD"`, `""`, `"Q"`, `"QQ==QQ=="`, `"A+/="`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, ok := plainBase64(data); !ok {
			return
		}
		var fast Base64
		fastErr := fast.UnmarshalJSON(data)
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatalf("a plain base64 string is not a JSON string: %q", data)
		}
		slow, slowErr := base64.StdEncoding.Strict().DecodeString(s)
		if slowErr == nil && base64.StdEncoding.EncodeToString(slow) != s {
			slowErr = errors.New("not canonical")
		}
		if (fastErr == nil) != (slowErr == nil) || fastErr == nil && !bytes.Equal(fast, slow) {
			t.Fatalf("%q: fast %x %v, general %x %v", data, []byte(fast), fastErr, slow, slowErr)
		}
	})
}
