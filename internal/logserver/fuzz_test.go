package logserver

import (
	"encoding/json"
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
