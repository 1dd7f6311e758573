package logserver

import (
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"svc.dev/svc/merkle"
)

// FuzzParseAppendBody: never panics; whatever it accepts is what encoding/json reads
// from the same body (the fast path agrees with the general one), and is valid UTF-8.
func FuzzParseAppendBody(f *testing.F) {
	f.Add([]byte(`{"leaf":"abc"}`))
	f.Add([]byte(`{"leaf":"a\"b"}`))
	f.Add([]byte(`{"leafHash":"` + merkle.LeafHash([]byte("x")).String() + `"}`))
	f.Add([]byte(`{"leaf":"x","leafHash":"00"}`))
	f.Add([]byte(`{"leaf":"\u00e9"} `))
	f.Add([]byte(`{"LEAF":"x"}`))
	f.Add([]byte(`{"leaf":"a","leaf":"b"}`))
	f.Add([]byte("{\"leaf\":\"\xff\"}"))
	f.Add([]byte(`{"leaf":"\ud800"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		leaf, err := ParseAppendBody(body)
		if err != nil {
			return
		}
		var req struct {
			Leaf     *string `json:"leaf"`
			LeafHash *string `json:"leafHash"`
		}
		if json.Unmarshal(body, &req) != nil {
			t.Fatalf("accepted %q, which encoding/json refuses", body)
		}
		if !utf8.Valid(leaf.Data) {
			t.Fatalf("body %q: accepted a leaf that is not valid UTF-8", body)
		}
		if req.Leaf != nil {
			if string(leaf.Data) != *req.Leaf || leaf.Hash != merkle.LeafHash([]byte(*req.Leaf)) {
				t.Fatalf("body %q: leaf %q, encoding/json reads %q", body, leaf.Data, *req.Leaf)
			}
		} else if leaf.Data != nil {
			t.Fatalf("body %q: a hash append kept data", body)
		}
	})
}

// FuzzParseTilePath: any path either fails with ErrTilePath or parses to a tile whose
// canonical form is the path itself (one path per tile).
func FuzzParseTilePath(f *testing.F) {
	for _, s := range []string{"0/000", "0/x001/x234/067", "entries/000.p/5", "7/x999/999.p/255", "0/000.p/256", "00/000", "0/x000/001", "entries/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseTilePath(s)
		if err != nil {
			if !errors.Is(err, ErrTilePath) {
				t.Fatalf("%q: error %v does not wrap ErrTilePath", s, err)
			}
			return
		}
		if got := p.String(); got != s {
			t.Fatalf("%q parses to %+v, whose path is %q", s, p, got)
		}
	})
}

// TestTileIndexEncoding: C2SP's own example, and the edges of the grouping.
func TestTileIndexEncoding(t *testing.T) {
	for n, want := range map[uint64]string{0: "000", 67: "067", 1000: "x001/000", 1234067: "x001/x234/067", 1<<64 - 1: "x018/x446/x744/x073/x709/x551/615"} {
		if got := EncodeTileIndex(n); got != want {
			t.Fatalf("EncodeTileIndex(%d) = %q, want %q", n, got, want)
		}
		p, err := ParseTilePath("entries/" + want)
		if err != nil || p.Index != n || !p.Entries || p.Partial() {
			t.Fatalf("ParseTilePath(entries/%s) = %+v, %v", want, p, err)
		}
	}
}
