package receipt

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
)

// SubjectName is the statement subject name of a tool call.
func SubjectName(tool, receiptID string) string {
	return "tool-call:" + tool + ":" + receiptID
}

// NewStatement builds an in-toto Statement v1 over predicate. The predicate is only
// marshalled here: signing canonicalizes the whole statement, predicate included.
func NewStatement(tool, receiptID, argsDigest, predicateType string, predicate any) (*Statement, error) {
	p, err := json.Marshal(predicate)
	if err != nil {
		return nil, fmt.Errorf("statement predicate: %w", err)
	}
	return &Statement{
		Type:          StatementType,
		Subject:       []Subject{{Name: SubjectName(tool, receiptID), Digest: map[string]string{"sha256": argsDigest}}},
		PredicateType: predicateType,
		Predicate:     p,
	}, nil
}

// Canonical returns the statement's canonical JSON, what Canonical(s) computes: the
// members around the predicate are written directly, so the predicate, kilobytes of
// JSON, is canonicalized once and not re-encoded inside the statement first.
func (s *Statement) Canonical() ([]byte, error) {
	raw := s.Predicate
	if raw == nil {
		raw = json.RawMessage("null") // as encoding/json writes a nil RawMessage
	}
	pred, err := CanonicalizeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("statement predicate: %w", err)
	}
	if !s.plain() { // encoding/json would rewrite invalid UTF-8: take its way
		return Canonical(s)
	}
	b := make([]byte, 0, len(pred)+256)
	b = s.appendHead(b)
	b = append(b, pred...)
	return s.appendTail(b), nil
}

// plain reports whether the statement's strings, apart from the predicate, are valid
// UTF-8, as appendHead and appendTail need.
func (s *Statement) plain() bool {
	valid := utf8.ValidString(s.Type) && utf8.ValidString(s.PredicateType)
	for _, sub := range s.Subject {
		valid = valid && utf8.ValidString(sub.Name)
		for k, v := range sub.Digest {
			valid = valid && utf8.ValidString(k) && utf8.ValidString(v)
		}
	}
	return valid
}

// appendHead writes the canonical statement up to its predicate's value.
func (s *Statement) appendHead(b []byte) []byte {
	b = append(b, `{"_type":`...)
	b = appendJCSString(b, s.Type)
	return append(b, `,"predicate":`...)
}

// appendTail writes the canonical statement after its predicate's value.
func (s *Statement) appendTail(b []byte) []byte {
	b = append(b, `,"predicateType":`...)
	b = appendJCSString(b, s.PredicateType)
	b = append(b, `,"subject":`...)
	if s.Subject == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, sub := range s.Subject {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"digest":`...)
			if sub.Digest == nil {
				b = append(b, "null"...)
			} else {
				keys := slices.SortedFunc(maps.Keys(sub.Digest), compareUTF16)
				b = append(b, '{')
				for j, k := range keys {
					if j > 0 {
						b = append(b, ',')
					}
					b = appendJCSString(b, k)
					b = append(b, ':')
					b = appendJCSString(b, sub.Digest[k])
				}
				b = append(b, '}')
			}
			b = append(b, `,"name":`...)
			b = appendJCSString(b, sub.Name)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// canonicalStatement is NewStatement(tool, receiptID, argsDigest, predicateType,
// pred).Canonical() with the predicate written by direct (appendCanonicalPredicate or
// appendCanonicalAuthorization) in one pass; when direct declines (a string that is
// not valid UTF-8) it takes that general path.
func canonicalStatement(tool, receiptID, argsDigest, predicateType string, pred any, sizeHint int,
	direct func(b []byte) ([]byte, bool, error)) ([]byte, error) {
	st := &Statement{
		Type:          StatementType,
		Subject:       []Subject{{Name: SubjectName(tool, receiptID), Digest: map[string]string{"sha256": argsDigest}}},
		PredicateType: predicateType,
	}
	if st.plain() {
		b := st.appendHead(make([]byte, 0, sizeHint+1024))
		b, ok, err := direct(b)
		if err != nil {
			return nil, fmt.Errorf("statement predicate: canonical json: %w", err)
		}
		if ok {
			return st.appendTail(b), nil
		}
	}
	st, err := NewStatement(tool, receiptID, argsDigest, predicateType, pred)
	if err != nil {
		return nil, err
	}
	return st.Canonical()
}

// DecodeStatement reads an in-toto statement from an envelope of type
// application/vnd.in-toto+json. The predicate is left as JSON.
func DecodeStatement(env *Envelope) (*Statement, error) {
	if env.PayloadType == PayloadInToto {
		if st, ok := parseSignedStatement(env.Payload); ok {
			return st, nil
		}
	}
	var s Statement
	if err := env.DecodePayload(PayloadInToto, &s); err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	return &s, nil
}

// DecodePredicate reads a receipt predicate strictly; one in the canonical form
// issuers sign is read without encoding/json (decodeCanonicalPredicate).
func (s *Statement) DecodePredicate() (*Predicate, error) {
	if p, ok := decodeCanonicalPredicate(s.Predicate); ok {
		return p, nil
	}
	var p Predicate
	if err := unmarshalStrict(s.Predicate, &p); err != nil {
		return nil, fmt.Errorf("receipt predicate: %w", err)
	}
	return &p, nil
}

// DecodeAuthorization reads an authorization predicate strictly, canonical form
// without encoding/json as DecodePredicate does.
func (s *Statement) DecodeAuthorization() (*AuthorizationPredicate, error) {
	if p, ok := decodeCanonicalAuthorization(s.Predicate); ok {
		return p, nil
	}
	var p AuthorizationPredicate
	if err := unmarshalStrict(s.Predicate, &p); err != nil {
		return nil, fmt.Errorf("authorization predicate: %w", err)
	}
	return &p, nil
}

// SubjectDigest returns the sha256 digest of the statement's single subject.
func (s *Statement) SubjectDigest() (string, error) {
	if len(s.Subject) != 1 {
		return "", fmt.Errorf("statement has %d subjects, want 1", len(s.Subject))
	}
	return s.Subject[0].Digest["sha256"], nil
}

// ResultDigest is the digest of an execution result given as JSON.
func ResultDigest(result json.RawMessage) (string, error) { return DigestJSON(result) }
