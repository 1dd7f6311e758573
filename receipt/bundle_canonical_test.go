package receipt

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestCanonicalBundleMatchesCanonical: the direct writer gives what Canonical gives,
// for every bundle of the conformance vectors and for edge cases of the inclusion.
func TestCanonicalBundleMatchesCanonical(t *testing.T) {
	var bundles []*Bundle
	for _, data := range vectorFiles(t, 0) {
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

// TestIndentedBundleMatchesMarshalIndent: the direct writer of the bundle file form
// gives json.MarshalIndent's bytes, and declines strings that need an escape.
func TestIndentedBundleMatchesMarshalIndent(t *testing.T) {
	files := vectorFiles(t, 0)
	n := 0
	for i, data := range files {
		b, err := ParseBundle(data)
		if err != nil {
			continue
		}
		for _, v := range []*Bundle{b, withHashes(b, nil), withHashes(b, []string{}), withSigs(b, nil), withSigs(b, []Signature{})} {
			want, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got, ok := appendIndentedBundle(nil, v)
			if !ok || !bytes.Equal(got, append(want, '\n')) {
				t.Fatalf("vector file %d: ok %v\n got %s\nwant %s", i, ok, got, want)
			}
			n++
		}
	}
	if n < 100 {
		t.Fatalf("only %d bundles compared", n)
	}
	var b Bundle
	if err := json.Unmarshal(files[0], &b); err != nil {
		t.Fatal(err)
	}
	big := b
	big.Inclusion.TreeSize = maxExactInt
	if _, ok := appendIndentedBundle(nil, &big); ok {
		t.Error("a tree size of 2^53 was written directly")
	}
	for _, s := range []string{"a<b", "a&b", "é", "a\"b", "a\\b", "\x01"} {
		if _, ok := appendIndentedBundle(nil, withHashes(&b, []string{s})); ok {
			t.Errorf("hash %q was written directly", s)
		}
	}
}

func withHashes(b *Bundle, hs []string) *Bundle {
	c := *b
	c.Inclusion.Hashes = hs
	return &c
}

func withSigs(b *Bundle, sigs []Signature) *Bundle {
	c := *b
	env := *c.TreeHead
	env.Signatures = sigs
	c.TreeHead = &env
	return &c
}

// FuzzIndentedBundleExact: a file equal to the direct bundle-file writer's output is in
// exact form (so ParseBundle may skip the canonical comparison for it).
func FuzzIndentedBundleExact(f *testing.F) {
	for _, data := range vectorFiles(f, 8) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Bundle
		if err := unmarshalStrict(data, &b); err != nil {
			return
		}
		file, ok := appendIndentedBundle(nil, &b)
		if !ok || !bytes.Equal(file, data) {
			return
		}
		if err := exactForm(data, &b); err != nil {
			t.Fatalf("the direct form of a bundle is not exact: %v", err)
		}
	})
}

// checkFileForm fails t when parseFileForm accepts data and encoding/json (the general
// path) reads another bundle from it, or when data is not in exact form.
func checkFileForm(t *testing.T, data []byte) bool {
	t.Helper()
	fast, ok := parseFileForm(data)
	if !ok {
		return false
	}
	var slow Bundle
	if err := unmarshalStrict(data, &slow); err != nil {
		t.Fatalf("the file form parser accepted what encoding/json refuses: %v", err)
	}
	if !reflect.DeepEqual(*fast, slow) {
		t.Fatalf("file form parser %+v, encoding/json %+v", *fast, slow)
	}
	if err := exactForm(data, fast); err != nil {
		t.Fatalf("the file form is not exact: %v", err)
	}
	return true
}

// TestParseFileForm: every bundle file of the vectors is read by the file form parser
// as encoding/json reads it; a file in another layout is left to the general path.
func TestParseFileForm(t *testing.T) {
	files := vectorFiles(t, 0)
	n := 0
	for i, data := range files {
		if checkFileForm(t, data) {
			n++
		}
		var compact bytes.Buffer
		if json.Compact(&compact, data) == nil && checkFileForm(t, compact.Bytes()) {
			t.Errorf("vector file %d: a compact file was read by the file form parser", i)
		}
	}
	if n < 20 {
		t.Fatalf("only %d of %d vector files read in file form", n, len(files))
	}
}

// FuzzParseFileForm: whatever the file form parser accepts, encoding/json reads the
// same from, and it is in exact form.
func FuzzParseFileForm(f *testing.F) {
	for _, data := range vectorFiles(f, 8) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkFileForm(t, data) })
}

// checkSignedStatement fails t when parseSignedStatement accepts payload and
// encoding/json reads another statement from it (or refuses it).
func checkSignedStatement(t *testing.T, payload []byte) bool {
	t.Helper()
	fast, ok := parseSignedStatement(payload)
	if !ok {
		return false
	}
	var slow Statement
	if err := unmarshalStrict(payload, &slow); err != nil {
		t.Fatalf("the statement parser accepted what encoding/json refuses: %v\n%s", err, payload)
	}
	if !reflect.DeepEqual(*fast, slow) {
		t.Fatalf("statement parser %+v\nencoding/json %+v", *fast, slow)
	}
	return true
}

// TestParseSignedStatement: every statement signed in the vectors (receipts,
// authorizations) is read by the statement parser as encoding/json reads it.
func TestParseSignedStatement(t *testing.T) {
	n := 0
	for _, data := range vectorFiles(t, 0) {
		b, err := ParseBundle(data)
		if err != nil || b.Envelope.PayloadType != PayloadInToto {
			continue
		}
		if checkSignedStatement(t, b.Envelope.Payload) {
			n++
		}
	}
	if n < 20 {
		t.Fatalf("only %d statements read by the statement parser", n)
	}
	for _, bad := range []string{
		`{"_type":"a","predicate":{},"predicateType":"b","subject":[{"digest":{"sha256":"c"},"name":"d"}]} `,
		`{"_type":"a\u0041","predicate":{},"predicateType":"b","subject":[{"digest":{"sha256":"c"},"name":"d"}]}`,
		`{"_type":"a","predicate":{"x":},"predicateType":"b","subject":[{"digest":{"sha256":"c"},"name":"d"}]}`,
		`{"_type":"a","predicate":null,"predicateType":"b","subject":[{"digest":{"sha256":"c"},"name":"d"}]}`,
	} {
		if _, ok := parseSignedStatement([]byte(bad)); ok {
			t.Errorf("accepted %s", bad)
		}
	}
	if !checkSignedStatement(t, []byte(`{"_type":"a","predicate":{"s":",\"predicateType\":\"x"},"predicateType":"b","subject":[{"digest":{"sha256":"c"},"name":"d"}]}`)) {
		t.Error("a predicate holding the text of the next member was not read")
	}
}

// FuzzParseSignedStatement: whatever the statement parser accepts, encoding/json reads
// the same from.
func FuzzParseSignedStatement(f *testing.F) {
	for _, data := range vectorFiles(f, 6) {
		if b, err := ParseBundle(data); err == nil {
			f.Add([]byte(b.Envelope.Payload))
		}
	}
	f.Add([]byte(`{"_type":"a","predicate":{},"predicateType":"b","subject":[{"digest":{"sha256":"c"},"name":"d"}]}`))
	f.Fuzz(func(t *testing.T, payload []byte) { checkSignedStatement(t, payload) })
}

// vectorFiles reads the bundle files of the conformance vectors: the first n, or all
// of them (at least 20) when n is 0.
func vectorFiles(tb testing.TB, n int) [][]byte {
	tb.Helper()
	files, err := filepath.Glob("../conformance/vectors/cases/*.json")
	if err != nil || len(files) < 20 {
		tb.Fatalf("vectors: %d files, %v", len(files), err)
	}
	if n > 0 {
		files = files[:min(len(files), n)]
	}
	out := make([][]byte, len(files))
	for i, f := range files {
		if out[i], err = os.ReadFile(f); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}
