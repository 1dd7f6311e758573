package pipeline

import (
	"bytes"
	"errors"
	"strings"
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

// FuzzDecodeBundle: never panics, never returns more than MaxBundleLeaves entries, and
// a bundle whose leaves are all accepted re-encodes to the same bytes.
func FuzzDecodeBundle(f *testing.F) {
	good := NewBundleRequest("t", []Leaf{NewLeaf([]byte("a")), {Hash: NewLeaf([]byte("b")).Hash}}, "inbox").Data
	f.Add(good)
	f.Add(NewBundleRequest("t", []Leaf{NewLeaf([]byte("\xff"))}, "inbox").Data)
	f.Add([]byte("SVQ1\x00\x00\x00\x01\x01\x00\x00\x00\x02ab"))
	f.Add([]byte("SVQ1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := DecodeBundle(data)
		if err != nil {
			if !errors.Is(err, ErrBadBundle) {
				t.Fatalf("error outside ErrBadBundle: %v", err)
			}
			return
		}
		if len(entries) == 0 || len(entries) > MaxBundleLeaves {
			t.Fatalf("%d entries", len(entries))
		}
		leaves := make([]Leaf, 0, len(entries))
		for _, e := range entries {
			if e.Err != nil {
				return
			}
			leaves = append(leaves, e.Leaf)
		}
		if got := NewBundleRequest("t", leaves, "inbox").Data; !bytes.Equal(got, data) {
			t.Fatalf("decode/encode changed the bundle")
		}
	})
}

// FuzzDecodeBundleReply: never panics, and what decodes re-encodes to the same bytes.
func FuzzDecodeBundleReply(f *testing.F) {
	m, err := EncodeBundleReply("inbox", []byte(`{"head":1}`), []BundleAnswer{{Inclusion: []byte(`{"leafIndex":1}`)}, {Refusal: Refuse(ErrQuota, 60, "monthly quota reached")}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(m.Data)
	f.Add([]byte("SVA1\x00\x00\x00\x00\x00\x00\x00\x01\x02ok\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		head, answers, err := DecodeBundleReply(data)
		if err != nil {
			return
		}
		m, err := EncodeBundleReply("inbox", head, answers)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(m.Data, data) {
			t.Fatalf("decode/encode changed the reply")
		}
	})
}

func TestBundleWireFormat(t *testing.T) {
	leaves := []Leaf{NewLeaf([]byte("first")), {Hash: NewLeaf([]byte("h")).Hash}, NewLeaf([]byte(""))}
	leaves[2].Data = []byte{} // empty: refused on its own
	m := NewBundleRequest("acme", leaves, "inbox.1")
	if RequestLeaves(m.Header) != 3 || m.Header.Get(HeaderReply) != "inbox.1" || m.Subject != AppendSubject("acme") {
		t.Fatalf("headers %v subject %s", m.Header, m.Subject)
	}
	entries, err := DecodeBundle(m.Data)
	if err != nil || len(entries) != 3 {
		t.Fatal(err)
	}
	if entries[0].Err != nil || entries[0].Leaf.Hash != leaves[0].Hash || entries[1].Leaf.Data != nil || entries[1].Leaf.Hash != leaves[1].Hash {
		t.Fatalf("entries %+v", entries)
	}
	if !errors.Is(entries[2].Err, ErrInvalid) {
		t.Fatalf("empty leaf: %v", entries[2].Err)
	}
	huge := bytes.Repeat([]byte{0}, MaxBundleBytes+1)
	copy(huge, "SVQ1\x00\x00\x00\x01")
	for _, bad := range [][]byte{nil, []byte("SVQ2\x00\x00\x00\x01"), m.Data[:len(m.Data)-1], append(bytes.Clone(m.Data), 0),
		[]byte("SVQ1\x00\x00\x00\x00"), []byte("SVQ1\x00\x00\x04\x01" + strings.Repeat("\x00\x00\x00\x00\x00", 1025)), huge} {
		if _, err := DecodeBundle(bad); !errors.Is(err, ErrBadBundle) {
			t.Fatalf("accepted a bad bundle of %d bytes: %v", len(bad), err)
		}
	}
	if RequestLeaves(nats.Header{HeaderKind: {KindBundle}, HeaderCount: {"5000"}}) != 1 || RequestLeaves(nats.Header{HeaderKind: {KindLeaf}}) != 1 {
		t.Fatal("RequestLeaves trusts a bad count")
	}

	head := []byte(`{"payload":"x"}`)
	rep, err := EncodeBundleReply("inbox.1", head, []BundleAnswer{{Inclusion: []byte(`{"leafIndex":4}`)}, {Refusal: Refuse(ErrTooLarge, 0, "too large")}})
	if err != nil || rep.Header.Get(HeaderStatus) != StatusBundle {
		t.Fatal(err)
	}
	gotHead, answers, err := DecodeBundleReply(rep.Data)
	if err != nil || !bytes.Equal(gotHead, head) || len(answers) != 2 || !errors.Is(answers[1].Refusal, ErrTooLarge) || answers[1].Refusal.Message != "too large" {
		t.Fatalf("reply round trip: %v %q %+v", err, gotHead, answers)
	}
	if got := string(ProofJSON(answers[0].Inclusion, gotHead)); got != `{"inclusion":{"leafIndex":4},"treeHead":{"payload":"x"}}` {
		t.Fatalf("ProofJSON: %s", got)
	}
	if _, err := EncodeBundleReply("i", nil, []BundleAnswer{{Inclusion: []byte(`{}`)}}); err == nil {
		t.Fatal("encoded a proof without a head")
	}
}
