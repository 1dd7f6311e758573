package pipeline

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/client"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
)

// Request kinds (header Svc-Kind).
const (
	KindLeaf = "leaf"
	KindHash = "hash"
)

// NewRequest builds an append request for tenant: the leaf itself, or with hashOnly its
// 32-byte leaf hash. The reply goes to inbox.
func NewRequest(tenant string, l Leaf, inbox string) *nats.Msg {
	m := nats.NewMsg(AppendSubject(tenant))
	m.Header.Set(HeaderReply, inbox)
	if l.Data != nil {
		m.Header.Set(HeaderKind, KindLeaf)
		m.Data = l.Data
	} else {
		m.Header.Set(HeaderKind, KindHash)
		m.Data = l.Hash[:]
	}
	return m
}

// ParseRequest reads a single append request (a bundle is read with DecodeBundle).
// Its errors are *Refusal (ErrInvalid, ErrTooLarge).
func ParseRequest(m *nats.Msg) (Leaf, string, error) {
	inbox := m.Header.Get(HeaderReply)
	var l Leaf
	var ref *Refusal
	switch m.Header.Get(HeaderKind) {
	case KindLeaf:
		l, ref = checkLeaf(m.Data)
	case KindHash:
		l, ref = checkHash(m.Data)
	default:
		ref = Refuse(ErrInvalid, 0, "unknown %s %q", HeaderKind, m.Header.Get(HeaderKind))
	}
	if ref != nil {
		return Leaf{}, inbox, ref
	}
	return l, inbox, nil
}

// checkLeaf takes a leaf within SPEC.md's limits.
func checkLeaf(data []byte) (Leaf, *Refusal) {
	switch {
	case len(data) == 0:
		return Leaf{}, Refuse(ErrInvalid, 0, "empty leaf")
	case len(data) > MaxLeafBytes:
		return Leaf{}, Refuse(ErrTooLarge, 0, "leaf of %d bytes; the limit is %d", len(data), MaxLeafBytes)
	case !utf8.Valid(data):
		return Leaf{}, Refuse(ErrInvalid, 0, "leaf is not valid UTF-8 (a log file line holds it as a JSON string)")
	}
	return NewLeaf(data), nil
}

// checkHash takes a 32-byte leaf hash.
func checkHash(data []byte) (Leaf, *Refusal) {
	if len(data) != 32 {
		return Leaf{}, Refuse(ErrInvalid, 0, "leaf hash of %d bytes; want 32", len(data))
	}
	var h merkle.Hash
	copy(h[:], data)
	return Leaf{Hash: h}, nil
}

// Reply is the answer to an append request: a proof, or a refusal.
type Reply struct {
	Proof   *receipt.Proof
	Refusal *Refusal
}

// Encode writes the reply as a message to inbox: header Svc-Status is "ok" with the
// proof's JSON as the body, or the refusal's reason ("quota", "unavailable", ...) with
// {"error": message} as the body and, when set, Retry-After in seconds.
func (r *Reply) Encode(inbox string) (*nats.Msg, error) {
	m := nats.NewMsg(inbox)
	var err error
	if r.Refusal == nil {
		m.Header.Set(HeaderStatus, StatusOK)
		m.Data, err = json.Marshal(r.Proof)
		return m, err
	}
	reason, ok := wireReasons[r.Refusal.Reason]
	if !ok {
		return nil, fmt.Errorf("refusal with unknown reason %v", r.Refusal.Reason)
	}
	m.Header.Set(HeaderStatus, reason)
	if r.Refusal.RetryAfter > 0 {
		m.Header.Set("Retry-After", strconv.Itoa(r.Refusal.RetryAfter))
	}
	m.Data, err = json.Marshal(client.ErrorBody{Error: r.Refusal.Message})
	return m, err
}

// DecodeReply reads a reply message.
func DecodeReply(m *nats.Msg) (*Reply, error) {
	st := m.Header.Get(HeaderStatus)
	if st == StatusOK {
		var p receipt.Proof
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return nil, fmt.Errorf("append reply: %w", err)
		}
		if p.TreeHead == nil {
			return nil, fmt.Errorf("append reply: no treeHead")
		}
		return &Reply{Proof: &p}, nil
	}
	if reason := reasonNamed(st); reason != nil {
		ref := &Refusal{Reason: reason}
		if ra := m.Header.Get("Retry-After"); ra != "" {
			ref.RetryAfter, _ = strconv.Atoi(ra)
		}
		var e client.ErrorBody
		_ = json.Unmarshal(m.Data, &e)
		ref.Message = e.Error
		return &Reply{Refusal: ref}, nil
	}
	return nil, fmt.Errorf("append reply with unknown %s %q", HeaderStatus, st)
}
