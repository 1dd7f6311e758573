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

// ParseRequest reads an append request.
func ParseRequest(m *nats.Msg) (Leaf, string, error) {
	inbox := m.Header.Get(HeaderReply)
	switch m.Header.Get(HeaderKind) {
	case KindLeaf:
		if len(m.Data) == 0 || len(m.Data) > MaxLeafBytes {
			return Leaf{}, inbox, fmt.Errorf("leaf of %d bytes; want 1 to %d", len(m.Data), MaxLeafBytes)
		}
		if !utf8.Valid(m.Data) {
			return Leaf{}, inbox, fmt.Errorf("leaf is not valid UTF-8 (a log file line holds it as a JSON string)")
		}
		return NewLeaf(m.Data), inbox, nil
	case KindHash:
		if len(m.Data) != 32 {
			return Leaf{}, inbox, fmt.Errorf("leaf hash of %d bytes; want 32", len(m.Data))
		}
		var h merkle.Hash
		copy(h[:], m.Data)
		return Leaf{Hash: h}, inbox, nil
	}
	return Leaf{}, inbox, fmt.Errorf("unknown %s %q", HeaderKind, m.Header.Get(HeaderKind))
}

// Reply is the answer to an append request: a proof (status 200) or an error with an
// HTTP-like status and, for 429, the seconds to wait.
type Reply struct {
	Status     int
	RetryAfter int // seconds; 0 when not given
	Proof      *receipt.Proof
	Error      string
}

// Encode writes the reply as a message to inbox.
func (r *Reply) Encode(inbox string) (*nats.Msg, error) {
	m := nats.NewMsg(inbox)
	m.Header.Set(HeaderStatus, strconv.Itoa(r.Status))
	if r.RetryAfter > 0 {
		m.Header.Set("Retry-After", strconv.Itoa(r.RetryAfter))
	}
	var err error
	if r.Status == 200 {
		m.Data, err = json.Marshal(r.Proof)
	} else {
		m.Data, err = json.Marshal(client.ErrorBody{Error: r.Error})
	}
	return m, err
}

// DecodeReply reads a reply message.
func DecodeReply(m *nats.Msg) (*Reply, error) {
	st, err := strconv.Atoi(m.Header.Get(HeaderStatus))
	if err != nil {
		return nil, fmt.Errorf("append reply without a valid %s header", HeaderStatus)
	}
	r := &Reply{Status: st}
	if ra := m.Header.Get("Retry-After"); ra != "" {
		r.RetryAfter, _ = strconv.Atoi(ra)
	}
	if st == 200 {
		var p receipt.Proof
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return nil, fmt.Errorf("append reply: %w", err)
		}
		if p.TreeHead == nil {
			return nil, fmt.Errorf("append reply: no treeHead")
		}
		r.Proof = &p
		return r, nil
	}
	var e client.ErrorBody
	_ = json.Unmarshal(m.Data, &e)
	r.Error = e.Error
	return r, nil
}
