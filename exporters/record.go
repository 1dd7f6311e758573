package exporters

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"svc.dev/svc/receipt"
)

// Record is what the exporters send about one receipt: a copy of the fields SPEC.md's
// "Receipt exports" names, read from the signed statement and the bundle's proof. A
// nil pointer is a field the receipt has as null (or does not have).
type Record struct {
	ReceiptID              string
	Timestamp              time.Time
	IssuerKind             string
	IssuerKeyID            string
	Tool                   string
	Upstream               *string // tool.upstream
	Agent                  string
	AgentProvenance        string
	Principal              *string
	Status                 string  // execution.status
	Reason                 *string // execution.reason (denied, withheld) or execution.error (error)
	PolicyDecision         *string // nil when no policy was evaluated
	PolicyDigest           *string
	PolicyReasons          []string // nil when no policy was evaluated
	ArgsDigest             string
	LogLeafIndex           uint64
	LogTreeSize            uint64
	AuthorizationLeafIndex *uint64 // pre-committed calls only
	ConsumedCount          *int    // nil when the receipt has no consumed (SDK receipts)
	Model                  *string
	Session                *string // session.id
	// Change, when set, makes this record a tool definition change, not a receipt:
	// only Timestamp, Tool and Upstream are set besides it (toolchange.go).
	Change *ToolChange
}

// FromBundle reads a bundle's export record. It checks the statement's form, not its
// signature: the exporters copy a receipt the issuer has just written.
func FromBundle(b *receipt.Bundle) (*Record, error) {
	if b == nil || b.Envelope == nil {
		return nil, errors.New("bundle has no envelope")
	}
	st, err := receipt.DecodeStatement(b.Envelope)
	if err != nil {
		return nil, err
	}
	if st.PredicateType != receipt.PredicateReceipt {
		return nil, fmt.Errorf("predicateType %q is not a receipt", st.PredicateType)
	}
	p, err := st.DecodePredicate()
	if err != nil {
		return nil, err
	}
	if p.ReceiptID == "" {
		return nil, errors.New("receipt has no receiptId")
	}
	ts, err := receipt.ParseTime(p.Timestamp)
	if err != nil {
		return nil, fmt.Errorf("receipt %s: timestamp: %w", p.ReceiptID, err)
	}
	r := &Record{
		ReceiptID:       p.ReceiptID,
		Timestamp:       ts,
		IssuerKind:      p.Issuer.Kind,
		IssuerKeyID:     p.Issuer.KeyID,
		Tool:            p.Tool.Name,
		Agent:           p.Agent.ID,
		AgentProvenance: string(p.Agent.Provenance),
		Principal:       p.Principal.ID,
		Status:          p.Execution.Status,
		ArgsDigest:      p.Request.ArgsDigest,
		LogLeafIndex:    b.Inclusion.LeafIndex,
		LogTreeSize:     b.Inclusion.TreeSize,
		Model:           p.Model.ID,
		Session:         p.Session.ID,
	}
	if p.Tool.Upstream != "" {
		r.Upstream = ptr(p.Tool.Upstream)
	}
	switch p.Execution.Status {
	case receipt.StatusDenied, receipt.StatusWithheld:
		r.Reason = ptr(p.Execution.Reason)
	case receipt.StatusError:
		r.Reason = ptr(p.Execution.Error)
	}
	if pol := p.Policy; pol != nil {
		r.PolicyDecision = ptr(pol.Decision)
		r.PolicyDigest = ptr(pol.PolicyDigest)
		r.PolicyReasons = append([]string{}, pol.Reasons...)
	}
	if a := p.Authorization; a != nil {
		r.AuthorizationLeafIndex = ptr(a.Inclusion.LeafIndex)
	}
	if c := p.Consumed; c != nil {
		r.ConsumedCount = ptr(len(c.FactIDs))
	}
	return r, nil
}

func ptr[T any](v T) *T { return &v }

// TraceID is the OTLP trace id of a receipt: its UUID without hyphens (16 bytes). An
// id that is not 32 hex digits after removing hyphens (no issuer here makes one) is
// hashed instead, so every receipt still has one stable trace id.
func TraceID(receiptID string) [16]byte {
	var id [16]byte
	h := strings.ReplaceAll(receiptID, "-", "")
	if raw, err := hex.DecodeString(h); err == nil && len(raw) == 16 && !allZero(raw) {
		copy(id[:], raw)
		return id
	}
	sum := sha256.Sum256([]byte("svc/trace/" + receiptID))
	copy(id[:], sum[:16])
	return id
}

// SpanID is the OTLP span id of a receipt: the first 8 bytes of
// SHA-256("svc/span/" + receipt id), so a re-delivered export names the same span.
func SpanID(receiptID string) [8]byte {
	var id [8]byte
	sum := sha256.Sum256([]byte("svc/span/" + receiptID))
	copy(id[:], sum[:8])
	if allZero(id[:]) {
		id[7] = 1 // an all-zero span id is invalid
	}
	return id
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
