package pipeline

import (
	"bytes"
	"testing"

	"github.com/nats-io/nats.go"
)

// FuzzDecodeBatch: never panics, and what decodes re-encodes to the same bytes.
func FuzzDecodeBatch(f *testing.F) {
	b := &Batch{First: 7, Leaves: []Leaf{NewLeaf([]byte("a")), {Hash: NewLeaf([]byte("b")).Hash}}}
	f.Add(b.Encode())
	f.Add([]byte("SVB1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeBatch(data)
		if err != nil {
			return
		}
		if !bytes.Equal(got.Encode(), data) {
			t.Fatalf("decode/encode changed the batch")
		}
	})
}

// FuzzParseRequest: never panics; an accepted leaf request keeps its bytes.
func FuzzParseRequest(f *testing.F) {
	f.Add("leaf", []byte(`{"a":1}`))
	f.Add("hash", bytes.Repeat([]byte{1}, 32))
	f.Add("other", []byte{})
	f.Fuzz(func(t *testing.T, kind string, data []byte) {
		m := nats.NewMsg("svc.append.t")
		m.Header.Set(HeaderKind, kind)
		m.Header.Set(HeaderReply, "inbox")
		m.Data = data
		l, inbox, err := ParseRequest(m)
		if err != nil {
			return
		}
		if inbox != "inbox" || (kind == KindLeaf && !bytes.Equal(l.Data, data)) || (kind == KindHash && l.Data != nil) {
			t.Fatalf("kind %q: parsed %+v", kind, l)
		}
	})
}

func TestBatchRoundTrip(t *testing.T) {
	b := &Batch{First: 1 << 40, Leaves: []Leaf{NewLeaf([]byte("first")), {Hash: NewLeaf([]byte("h")).Hash}, NewLeaf(bytes.Repeat([]byte("x"), MaxLeafBytes))}}
	data := b.Encode()
	if len(data) != b.EncodedSize() {
		t.Fatalf("EncodedSize %d, encoded %d", b.EncodedSize(), len(data))
	}
	got, err := DecodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.First != b.First || len(got.Leaves) != 3 || got.Leaves[1].Data != nil || got.Leaves[0].Hash != b.Leaves[0].Hash || got.Leaves[2].Hash != b.Leaves[2].Hash {
		t.Fatalf("round trip: %+v", got)
	}
	for _, bad := range [][]byte{nil, []byte("SVB2xxxxxxxxxxxx"), data[:len(data)-1], append(bytes.Clone(data), 0)} {
		if _, err := DecodeBatch(bad); err == nil {
			t.Fatalf("accepted a bad batch of %d bytes", len(bad))
		}
	}
}
