package receipt

import (
	"encoding/json"
	"fmt"
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

// DecodeStatement reads an in-toto statement from an envelope of type
// application/vnd.in-toto+json. The predicate is left as JSON.
func DecodeStatement(env *Envelope) (*Statement, error) {
	var s Statement
	if err := env.DecodePayload(PayloadInToto, &s); err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	return &s, nil
}

// DecodePredicate reads a receipt predicate strictly.
func (s *Statement) DecodePredicate() (*Predicate, error) {
	var p Predicate
	if err := unmarshalStrict(s.Predicate, &p); err != nil {
		return nil, fmt.Errorf("receipt predicate: %w", err)
	}
	return &p, nil
}

// DecodeAuthorization reads an authorization predicate strictly.
func (s *Statement) DecodeAuthorization() (*AuthorizationPredicate, error) {
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
