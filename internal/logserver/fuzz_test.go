package logserver

import (
	"encoding/json"
	"testing"

	"svc.dev/svc/merkle"
)

// FuzzParseAppendBody: never panics; whatever it accepts is what encoding/json reads
// from the same body (the fast path agrees with the general one).
func FuzzParseAppendBody(f *testing.F) {
	f.Add([]byte(`{"leaf":"abc"}`))
	f.Add([]byte(`{"leaf":"a\"b"}`))
	f.Add([]byte(`{"leafHash":"` + merkle.LeafHash([]byte("x")).String() + `"}`))
	f.Add([]byte(`{"leaf":"x","leafHash":"00"}`))
	f.Add([]byte(`{"leaf":"\u00e9"} `))
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
		if req.Leaf != nil {
			if string(leaf.Data) != *req.Leaf || leaf.Hash != merkle.LeafHash([]byte(*req.Leaf)) {
				t.Fatalf("body %q: leaf %q, encoding/json reads %q", body, leaf.Data, *req.Leaf)
			}
		} else if leaf.Data != nil {
			t.Fatalf("body %q: a hash append kept data", body)
		}
	})
}
