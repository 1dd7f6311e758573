package merkle

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"
	"golang.org/x/mod/sumdb/tlog"
)

func TestEmptyRoot(t *testing.T) {
	if !bytes.Equal(EmptyRoot[:], testonly.EmptyRootHash()) {
		t.Fatalf("EmptyRoot = %s, want %x", EmptyRoot, testonly.EmptyRootHash())
	}
	if EmptyRoot != Hash(sha256.Sum256(nil)) {
		t.Fatal("EmptyRoot is not SHA-256 of the empty string")
	}
	if got := EmptyRoot.String(); got != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Fatalf("EmptyRoot.String() = %s", got)
	}
}

// TestLeafAndNodeHashKnownAnswers checks LeafHash and NodeHash against every
// node of the RFC 6962 8-leaf test tree (certificate-transparency's vectors,
// as published by transparency-dev/merkle/testonly), and against
// rfc6962.DefaultHasher and sumdb/tlog for the same inputs.
func TestLeafAndNodeHashKnownAnswers(t *testing.T) {
	nodes := testonly.NodeHashes()
	for i, leaf := range testonly.LeafInputs() {
		got := LeafHash(leaf)
		if !bytes.Equal(got[:], nodes[0][i]) {
			t.Errorf("LeafHash(%x) = %s, want %x", leaf, got, nodes[0][i])
		}
		if want := rfc6962.DefaultHasher.HashLeaf(leaf); !bytes.Equal(got[:], want) {
			t.Errorf("LeafHash(%x) = %s, rfc6962 says %x", leaf, got, want)
		}
		if want := tlog.RecordHash(leaf); got != Hash(want) {
			t.Errorf("LeafHash(%x) = %s, tlog.RecordHash says %s", leaf, got, want)
		}
	}
	for level := 1; level < len(nodes); level++ {
		for i, want := range nodes[level] {
			var l, r Hash
			copy(l[:], nodes[level-1][2*i])
			copy(r[:], nodes[level-1][2*i+1])
			got := NodeHash(l, r)
			if !bytes.Equal(got[:], want) {
				t.Errorf("level %d node %d = %s, want %x", level, i, got, want)
			}
			if tl := tlog.NodeHash(tlog.Hash(l), tlog.Hash(r)); got != Hash(tl) {
				t.Errorf("level %d node %d = %s, tlog.NodeHash says %s", level, i, got, tl)
			}
		}
	}
	// Large leaves take the streaming path of LeafHash.
	for _, n := range []int{254, 255, 256, 257, 10000} {
		data := bytes.Repeat([]byte{byte(n)}, n)
		got := LeafHash(data)
		if want := rfc6962.DefaultHasher.HashLeaf(data); !bytes.Equal(got[:], want) {
			t.Errorf("LeafHash of %d bytes = %s, want %x", n, got, want)
		}
	}
}

func TestParseHash(t *testing.T) {
	const lower = "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"
	want := Hash(testonly.RootHashes()[8])
	for _, s := range []string{lower, strings.ToUpper(lower), "5DC9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"} {
		h, err := ParseHash(s)
		if err != nil || h != want {
			t.Errorf("ParseHash(%q) = %s, %v; want %s", s, h, err, want)
		}
		if h.String() != lower {
			t.Errorf("String() = %s, want %s", h, lower)
		}
	}
	for _, s := range []string{
		"", lower[:63], lower + "0", " " + lower, lower + "\n", "0x" + lower[2:],
		"g" + lower[1:], lower[:62] + "é", strings.Repeat("z", 64),
	} {
		if h, err := ParseHash(s); !errors.Is(err, ErrMalformedHash) {
			t.Errorf("ParseHash(%q) = %s, %v; want ErrMalformedHash", s, h, err)
		}
	}
}

func TestHashText(t *testing.T) {
	h := LeafHash([]byte("x"))
	b, err := json.Marshal(struct{ H Hash }{h})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"H":"` + h.String() + `"}`; string(b) != want {
		t.Fatalf("json = %s, want %s", b, want)
	}
	var v struct{ H Hash }
	if err := json.Unmarshal(b, &v); err != nil || v.H != h {
		t.Fatalf("round trip = %s, %v", v.H, err)
	}
	if err := json.Unmarshal([]byte(`{"H":"00"}`), &v); !errors.Is(err, ErrMalformedHash) {
		t.Fatalf("short hash: err = %v, want ErrMalformedHash", err)
	}
}
