package receipt

import (
	"bytes"
	"reflect"
	"testing"
)

// checkDecodeCanonical fails t when the canonical predicate readers accept raw and
// encoding/json (the general path) reads another predicate from it or refuses it. It
// reports whether the receipt reader accepted raw.
func checkDecodeCanonical(t *testing.T, raw []byte) bool {
	t.Helper()
	fast, ok := decodeCanonicalPredicate(raw)
	if ok {
		var slow Predicate
		if err := unmarshalStrict(raw, &slow); err != nil {
			t.Fatalf("the predicate reader accepted what encoding/json refuses: %v\n%s", err, raw)
		}
		if !reflect.DeepEqual(*fast, slow) {
			t.Fatalf("predicate reader %+v\nencoding/json %+v\n%s", *fast, slow, raw)
		}
	}
	if fa, aok := decodeCanonicalAuthorization(raw); aok {
		var slow AuthorizationPredicate
		if err := unmarshalStrict(raw, &slow); err != nil {
			t.Fatalf("the authorization reader accepted what encoding/json refuses: %v\n%s", err, raw)
		}
		if !reflect.DeepEqual(*fa, slow) {
			t.Fatalf("authorization reader %+v\nencoding/json %+v\n%s", *fa, slow, raw)
		}
	}
	return ok
}

// signedPredicates are the predicates of every statement signed in the vectors.
func signedPredicates(tb testing.TB) (receipts, authorizations [][]byte) {
	for _, data := range vectorFiles(tb, 0) {
		b, err := ParseBundle(data)
		if err != nil || b.Envelope.PayloadType != PayloadInToto {
			continue
		}
		st, err := DecodeStatement(b.Envelope)
		if err != nil {
			continue
		}
		switch st.PredicateType {
		case PredicateReceipt:
			receipts = append(receipts, st.Predicate)
		case PredicateAuthorization:
			authorizations = append(authorizations, st.Predicate)
		}
	}
	return receipts, authorizations
}

// TestDecodeCanonicalPredicate: every signed predicate of the vectors is read by the
// canonical readers as encoding/json reads it; other layouts of the same predicate
// are left to the general path, which still reads them.
func TestDecodeCanonicalPredicate(t *testing.T) {
	receipts, auths := signedPredicates(t)
	n := 0
	for _, raw := range receipts {
		if checkDecodeCanonical(t, raw) {
			n++
		}
		spaced := bytes.Replace(raw, []byte(`":`), []byte(`": `), 1)
		if checkDecodeCanonical(t, spaced) {
			t.Errorf("a predicate with a space was read by the canonical reader")
		}
		st := Statement{Predicate: spaced}
		if _, err := st.DecodePredicate(); err != nil {
			t.Errorf("the general path refused a spaced predicate: %v", err)
		}
	}
	if n < 20 || n != len(receipts) {
		t.Fatalf("%d of %d signed receipt predicates read by the canonical reader", n, len(receipts))
	}
	a := 0
	for _, raw := range auths {
		if _, ok := decodeCanonicalAuthorization(raw); ok {
			a++
		}
		checkDecodeCanonical(t, raw)
	}
	if a == 0 || a != len(auths) {
		t.Fatalf("%d of %d signed authorization predicates read by the canonical reader", a, len(auths))
	}
	for _, bad := range []string{
		`{"agent":{"id":"a","provenance":"claimed"},"agent":{"id":"b","provenance":"claimed"}}`,
		`{"Agent":{"id":"a","provenance":"claimed"}}`,
		`null`, ``, `{}`,
	} {
		if _, ok := decodeCanonicalPredicate([]byte(bad)); ok {
			t.Errorf("accepted %s", bad)
		}
	}
}

// FuzzDecodeCanonicalPredicate: whatever the canonical readers accept, encoding/json
// reads the same from; generated predicates in canonical form are all accepted.
func FuzzDecodeCanonicalPredicate(f *testing.F) {
	receipts, auths := signedPredicates(f)
	for _, raw := range append(receipts[:min(8, len(receipts))], auths[:min(4, len(auths))]...) {
		f.Add(raw, []byte{})
	}
	f.Add([]byte{}, bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 12))
	f.Add([]byte{}, bytes.Repeat([]byte{0, 7, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53}, 16))
	f.Fuzz(func(t *testing.T, raw, gen []byte) {
		checkDecodeCanonical(t, raw)
		if len(gen) == 0 {
			return
		}
		g := &predicateGen{data: gen, raws: []string{`{"k":"v"}`, `[1,"\n",{"a":null}]`}}
		p := g.predicate()
		if c, ok, err := appendCanonicalPredicate(nil, p, predicateArgs{}, nil); ok && err == nil {
			// The fast reader declines escapes and a predicate with relayed requests (rare:
			// a call that relayed sampling or elicitation; the general path reads it).
			if !checkDecodeCanonical(t, c) && !bytes.ContainsRune(c, '\\') && p.Relayed == nil {
				t.Fatalf("a canonical predicate without escapes was not read: %s", c)
			}
		}
		if c, ok, err := appendCanonicalAuthorization(nil, p.authorizationPredicate(), predicateArgs{}); ok && err == nil {
			checkDecodeCanonical(t, c)
		}
	})
}

// FuzzDecodeReceipt: DecodeReceipt reads the statement and predicate that
// DecodeStatement and DecodePredicate read, one after the other, and fails where
// they fail; the signed payloads of the vectors take its one-pass path.
func FuzzDecodeReceipt(f *testing.F) {
	for i, data := range vectorFiles(f, 0) {
		b, err := ParseBundle(data)
		if err != nil || i%8 != 0 {
			continue
		}
		f.Add([]byte(b.Envelope.Payload))
	}
	f.Add([]byte(`{"_type":"x","predicate":{},"predicateType":"` + PredicateReceipt + `","subject":[{"digest":{"sha256":"a"},"name":"b"}]}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		env := &Envelope{PayloadType: PayloadInToto, Payload: payload}
		st, p, err := DecodeReceipt(env)
		slowSt, slowErr := DecodeStatement(env)
		var slowP *Predicate
		if slowErr == nil {
			slowP, slowErr = slowSt.DecodePredicate()
		}
		switch {
		case (err == nil) != (slowErr == nil):
			t.Fatalf("DecodeReceipt: %v; step by step: %v", err, slowErr)
		case err != nil:
			if err.Error() != slowErr.Error() {
				t.Fatalf("DecodeReceipt: %v; step by step: %v", err, slowErr)
			}
		case !reflect.DeepEqual(st, slowSt) || !reflect.DeepEqual(p, slowP):
			t.Fatalf("DecodeReceipt %+v %+v\nstep by step %+v %+v", st, p, slowSt, slowP)
		}
	})
}
