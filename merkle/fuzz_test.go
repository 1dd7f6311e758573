package merkle

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func FuzzParseHash(f *testing.F) {
	f.Add(EmptyRoot.String())
	f.Add(strings.ToUpper(EmptyRoot.String()))
	f.Add("")
	f.Add(strings.Repeat("g", 64))
	f.Add(EmptyRoot.String()[:63] + "é")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHash(s)
		if err != nil {
			if !errors.Is(err, ErrMalformedHash) {
				t.Fatalf("error %v does not wrap ErrMalformedHash", err)
			}
			return
		}
		if h.String() != strings.ToLower(s) {
			t.Fatalf("ParseHash(%q).String() = %s", s, h)
		}
		var u Hash
		if err := u.UnmarshalText([]byte(s)); err != nil || u != h {
			t.Fatalf("UnmarshalText(%q) = %s, %v", s, u, err)
		}
	})
}

func FuzzParseLine(f *testing.F) {
	h := LeafHash([]byte("x")).String()
	for _, s := range []string{
		`"x"`, `""`, `"\u0000\"\\ é 😀"`, ` "x" `, `{"hash":"` + h + `"}`, `{"pruned":"` + h + `"}`,
		`{ "hash" : "` + strings.ToUpper(h) + `" }`, `{}`, `{"hash":1}`, `null`, `"x`, "\"\xff\"",
		`{"hash":"` + h + `","hash":"` + h + `"}`, `{"hash":"` + h + `"} x`,
		`"{\"payload\":\"eyJ4IjoxfQ\",\"sig\":\"a\\\\b\"}"`, `"\"\\\""`, `"a\/b"`, `"\u2028"`, "\"\u2029 \\\"\"", `"x\"`, `"\\"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := ParseLine(line)
		if len(line) <= MaxLineSize {
			// The fast path for canonical lines agrees with encoding/json.
			slow, serr := parseLineSlow(line)
			if (serr == nil) != (err == nil) || slow != e {
				t.Fatalf("ParseLine(%q) = %+v, %v; parseLineSlow = %+v, %v", line, e, err, slow, serr)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrMalformedLine) && !errors.Is(err, ErrLineTooLong) {
				t.Fatalf("error %v wraps neither ErrMalformedLine nor ErrLineTooLong", err)
			}
			return
		}
		switch e.Kind {
		case LineLeaf:
			if e.Hash != LeafHash([]byte(e.Leaf)) {
				t.Fatal("leaf entry's hash is not its leaf hash")
			}
		case LineHash, LinePruned:
			if e.Leaf != "" {
				t.Fatal("hash entry with a leaf")
			}
		default:
			t.Fatalf("kind %v", e.Kind)
		}
		// What parses can be written, and reads back the same.
		out, h, err := appendLine(nil, e)
		if err != nil {
			t.Fatalf("appendLine(%+v): %v", e, err)
		}
		if h != e.Hash || out[len(out)-1] != '\n' || bytes.Count(out, []byte("\n")) != 1 {
			t.Fatalf("appendLine wrote %q, hash %s", out, h)
		}
		e2, err := ParseLine(out[:len(out)-1])
		if err != nil || e2 != e {
			t.Fatalf("round trip of %q through %q: %+v, %v", line, out, e2, err)
		}
		if e.Kind == LineLeaf {
			// A leaf line is written as encoding/json writes the string, byte for byte,
			// whether or not appendQuoted took it.
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(e.Leaf); err != nil || !bytes.Equal(out, want.Bytes()) {
				t.Fatalf("appendLine wrote %q, encoding/json %q (%v)", out, want.Bytes(), err)
			}
		}
	})
}

func FuzzReadLogFile(f *testing.F) {
	var valid []byte
	for _, e := range sampleEntries() {
		valid, _, _ = appendLine(valid, e)
	}
	f.Add(valid)
	f.Add(append(bytes.Clone(valid), `"torn`...))
	f.Add(append(bytes.Clone(valid), "{}\n"...))
	f.Add([]byte("\"a\"\n{}\n\"b\"\n"))
	f.Add([]byte("\n\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ReadLogFile(bytes.NewReader(data))
		var le *LineError
		switch {
		case err == nil:
		case errors.Is(err, ErrTornLine):
		case errors.As(err, &le):
			if entries != nil {
				t.Fatal("entries returned with a LineError")
			}
			if le.Line < 1 || le.Offset < 0 || le.Offset > int64(len(data)) {
				t.Fatalf("LineError %+v out of range", le)
			}
			return
		default:
			t.Fatalf("unexpected error %v", err)
		}
		// Every entry is a line of the input, in order; re-encoding them
		// gives input that reads back the same, without error.
		var out []byte
		for _, e := range entries {
			if out, _, err = appendLine(out, e); err != nil {
				t.Fatalf("appendLine: %v", err)
			}
		}
		again, err := ReadLogFile(bytes.NewReader(out))
		if err != nil || len(again) != len(entries) {
			t.Fatalf("re-read: %d entries, %v; want %d", len(again), err, len(entries))
		}
		for i := range again {
			if again[i] != entries[i] {
				t.Fatalf("entry %d: %+v != %+v", i, again[i], entries[i])
			}
		}
		if n := bytes.Count(data, []byte("\n")); len(entries) > n {
			t.Fatalf("%d entries from %d newlines", len(entries), n)
		}
	})
}

// splitHashes cuts b into 32-byte hashes, dropping a partial tail.
func splitHashes(b []byte) []Hash {
	out := make([]Hash, len(b)/HashSize)
	for i := range out {
		copy(out[i][:], b[i*HashSize:])
	}
	return out
}

func FuzzVerifyInclusion(f *testing.F) {
	pt := buildTree(f, NewMemoryStore(), randomLeaves(20, 13))
	p, _ := pt.InclusionProof(5, 13)
	root, _ := pt.RootAt(13)
	leaf, _ := pt.LeafHash(5)
	var pb []byte
	for _, h := range p {
		pb = append(pb, h[:]...)
	}
	f.Add(uint64(5), uint64(13), leaf[:], pb, root[:])
	f.Add(uint64(0), uint64(0), []byte{}, []byte{}, []byte{})
	f.Add(uint64(1<<63), uint64(1<<64-1), leaf[:], pb, root[:])
	f.Fuzz(func(t *testing.T, index, size uint64, leafB, proofB, rootB []byte) {
		var leaf, root Hash
		copy(leaf[:], leafB)
		copy(root[:], rootB)
		proof := splitHashes(proofB)
		r, rerr := RootFromInclusionProof(index, size, leaf, proof)
		err := VerifyInclusion(index, size, leaf, proof, root)
		switch {
		case index >= size:
			if !errors.Is(err, ErrIndexOutOfRange) || !errors.Is(rerr, ErrIndexOutOfRange) {
				t.Fatalf("index %d >= size %d: %v, %v", index, size, err, rerr)
			}
		case rerr != nil:
			if !errors.Is(err, ErrInvalidProof) || !errors.Is(rerr, ErrInvalidProof) {
				t.Fatalf("bad proof length: %v, %v", err, rerr)
			}
		case (r == root) != (err == nil):
			t.Fatalf("RootFromInclusionProof gives %s, VerifyInclusion against %s says %v", r, root, err)
		case err != nil && !errors.Is(err, ErrInvalidProof):
			t.Fatalf("mismatch error %v", err)
		}
		// It agrees with its own root.
		if rerr == nil {
			if err := VerifyInclusion(index, size, leaf, proof, r); err != nil {
				t.Fatalf("proof rejected against the root it gives: %v", err)
			}
		}
	})
}

func FuzzVerifyConsistency(f *testing.F) {
	pt := buildTree(f, NewMemoryStore(), randomLeaves(21, 13))
	p, _ := pt.ConsistencyProof(6, 13)
	r6, _ := pt.RootAt(6)
	r13, _ := pt.RootAt(13)
	var pb []byte
	for _, h := range p {
		pb = append(pb, h[:]...)
	}
	f.Add(uint64(6), uint64(13), r6[:], r13[:], pb)
	f.Add(uint64(0), uint64(13), EmptyRoot[:], r13[:], []byte{})
	f.Add(uint64(13), uint64(6), r13[:], r6[:], pb)
	f.Add(uint64(1<<64-1), uint64(1<<64-1), r13[:], r13[:], []byte{})
	f.Fuzz(func(t *testing.T, oldSize, newSize uint64, oldB, newB, proofB []byte) {
		var oldRoot, newRoot Hash
		copy(oldRoot[:], oldB)
		copy(newRoot[:], newB)
		proof := splitHashes(proofB)
		err := VerifyConsistency(oldSize, newSize, oldRoot, newRoot, proof)
		switch {
		case oldSize > newSize:
			if !errors.Is(err, ErrSizeOutOfRange) {
				t.Fatalf("old > new: %v", err)
			}
		case err != nil && !errors.Is(err, ErrInvalidProof):
			t.Fatalf("error %v", err)
		case err == nil && (oldSize == newSize || oldSize == 0) && len(proof) != 0:
			t.Fatal("non-empty proof accepted where only an empty one is valid")
		}
	})
}

// FuzzProofs builds a tree of a fuzzed size and checks that every proof it
// gives verifies and that a flipped bit is caught.
func FuzzProofs(f *testing.F) {
	f.Add(uint16(13), uint16(5), uint16(7), uint16(100))
	f.Add(uint16(1), uint16(0), uint16(0), uint16(0))
	f.Add(uint16(64), uint16(63), uint16(32), uint16(255))
	f.Fuzz(func(t *testing.T, n, a, b, bit uint16) {
		size := uint64(n%300) + 1
		leaves := make([]Hash, size)
		var buf [8]byte
		for i := range leaves {
			binary.BigEndian.PutUint64(buf[:], uint64(i))
			leaves[i] = LeafHash(buf[:])
		}
		tr := buildTree(t, NewMemoryStore(), leaves)
		index := uint64(a) % size
		old := uint64(b) % (size + 1)
		root := tr.Root()
		p, err := tr.InclusionProof(index, size)
		if err != nil {
			t.Fatal(err)
		}
		if err := VerifyInclusion(index, size, leaves[index], p, root); err != nil {
			t.Fatal(err)
		}
		if len(p) > 0 {
			q := flipBit(p, int(bit)%len(p), uint(bit)%256)
			if VerifyInclusion(index, size, leaves[index], q, root) == nil {
				t.Fatal("flipped inclusion proof accepted")
			}
		}
		oldRoot, _ := tr.RootAt(old)
		c, err := tr.ConsistencyProof(old, size)
		if err != nil {
			t.Fatal(err)
		}
		if err := VerifyConsistency(old, size, oldRoot, root, c); err != nil {
			t.Fatal(err)
		}
		if len(c) > 0 {
			q := flipBit(c, int(bit)%len(c), uint(bit)%256)
			if VerifyConsistency(old, size, oldRoot, root, q) == nil {
				t.Fatal("flipped consistency proof accepted")
			}
		}
	})
}
