package receipt

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// parseSignedStatement reads a statement in the canonical form issuers sign,
// {"_type":…,"predicate":{…},"predicateType":…,"subject":[{"digest":{"sha256":…},"name":…}]},
// with one pass over the predicate (a validity scan) instead of encoding/json's three.
// It gives up (false) at anything else: another member layout, a string with an
// escape, a control character or invalid UTF-8, a predicate that is not a valid JSON
// object. What it accepts is one JSON object with exactly those members, so
// encoding/json reads the same Statement from it (FuzzParseSignedStatement).
func parseSignedStatement(payload []byte) (*Statement, bool) {
	st, ok := parseStatementFrame(payload)
	if !ok || !json.Valid(st.Predicate) {
		return nil, false
	}
	st.Predicate = bytes.Clone(st.Predicate)
	return st, true
}

// parseStatementFrame is parseSignedStatement without the predicate's validity scan:
// the predicate it returns is an object's bytes, {…}, not yet known to be JSON. The
// caller scans it or parses it strictly. The predicate shares payload's bytes.
func parseStatementFrame(payload []byte) (*Statement, bool) {
	p := fileFormParser{data: payload}
	p.lit(`{"_type":`)
	typ := p.plainStr()
	p.lit(`,"predicate":`)
	if p.bad {
		return nil, false
	}
	const mid = `,"predicateType":`
	j := bytes.LastIndex(payload, []byte(mid))
	if j < p.i+2 {
		return nil, false
	}
	raw := payload[p.i:j]
	if raw[0] != '{' || raw[len(raw)-1] != '}' {
		return nil, false
	}
	p.i = j + len(mid)
	pt := p.plainStr()
	p.lit(`,"subject":[{"digest":{"sha256":`)
	digest := p.plainStr()
	p.lit(`},"name":`)
	name := p.plainStr()
	p.lit(`}]}`)
	if p.bad || p.i != len(payload) {
		return nil, false
	}
	return &Statement{
		Type: typ, PredicateType: pt, Predicate: json.RawMessage(raw),
		Subject: []Subject{{Name: name, Digest: map[string]string{"sha256": digest}}},
	}, true
}

// DecodeReceipt reads a receipt's statement and its predicate: DecodeStatement then
// DecodePredicate, with their errors, and no check of _type or predicateType. A
// statement signed in the canonical form with a receipt predicate in canonical form
// is read in one pass: the strict parse of the predicate, which accepts only bytes
// it writes back identically, stands for the statement's validity scan. The
// statement's Predicate may share env.Payload's bytes.
func DecodeReceipt(env *Envelope) (*Statement, *Predicate, error) {
	if env.PayloadType == PayloadInToto {
		if st, ok := parseStatementFrame(env.Payload); ok && st.PredicateType == PredicateReceipt {
			if p, ok := decodeCanonicalPredicate(st.Predicate); ok {
				return st, p, nil
			}
		}
	}
	st, err := DecodeStatement(env)
	if err != nil {
		return nil, nil, err
	}
	p, err := st.DecodePredicate()
	if err != nil {
		return nil, nil, err
	}
	return st, p, nil
}

// plainStr reads a JSON string that encoding/json decodes to its bytes as they stand:
// no escapes, no control characters, valid UTF-8.
func (p *fileFormParser) plainStr() string {
	s := p.str()
	if p.bad {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 {
			p.bad = true
			return ""
		}
	}
	if !utf8.ValidString(s) {
		p.bad = true
		return ""
	}
	return s
}
