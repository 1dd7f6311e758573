package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// A bundle is one append request carrying several leaves of one tenant: what a Client
// with ClientConfig.Bundle sends when several callers append at once, so that the
// broker carries one message, one delivery, one ack and one reply for them all. The
// sequencer answers a bundle with one reply holding each leaf's own answer: its
// inclusion proof under the batch's signed head, or its own refusal.
//
// Request: header Svc-Kind "bundle", Svc-Reply the producer's inbox, Svc-Count the
// number of leaves; body "SVQ1", count (uint32 BE), then per leaf a kind byte (0: leaf,
// 1: leaf hash), a length (uint32 BE) and the bytes.
//
// Reply: header Svc-Status "bundle"; body "SVA1", the signed head's JSON with its
// length (uint32 BE; 0 when no leaf got a proof), count (uint32 BE), then per leaf its
// status ("ok" or a refusal's reason as in a single reply) with its length (one byte),
// Retry-After in seconds (uint32 BE), and a body with its length (uint32 BE): for "ok"
// the inclusion proof's JSON ({leafIndex, treeSize, hashes}), else the refusal's
// message. A bundle malformed as a whole is answered with a single refusal.
const (
	KindBundle     = "bundle"
	StatusBundle   = "bundle"
	bundleMagic    = "SVQ1"
	bundleAnsMagic = "SVA1"
)

// Bundle limits: a bundle stays well below a batch (MaxBatchBytes) and the broker's
// max_payload, so that one always fits in the sequencer's next batch.
const (
	MaxBundleLeaves = 1024
	MaxBundleBytes  = 512 << 10
)

// DefaultBundle is the ClientConfig.Bundle of the log's HTTP front: bundles of up to
// 256 leaves.
const DefaultBundle = 256

// ErrBadBundle wraps every error of a bundle malformed as a whole.
var ErrBadBundle = errors.New("malformed bundle")

// BundleEntry is one leaf of a parsed bundle: the leaf, or why it is refused alone
// (empty, too large, not UTF-8, a hash of the wrong size).
type BundleEntry struct {
	Leaf Leaf
	Err  *Refusal
}

func leafKind(l Leaf) (byte, []byte) {
	if l.Data != nil {
		return 0, l.Data
	}
	return 1, l.Hash[:]
}

// bundleSize is the encoded size of a bundle of leaves.
func bundleSize(leaves []Leaf) int {
	n := len(bundleMagic) + 4
	for _, l := range leaves {
		_, b := leafKind(l)
		n += 5 + len(b)
	}
	return n
}

// NewBundleRequest builds a bundle of leaves for tenant, answered on inbox. The caller
// keeps it within MaxBundleLeaves and MaxBundleBytes.
func NewBundleRequest(tenant string, leaves []Leaf, inbox string) *nats.Msg {
	m := nats.NewMsg(AppendSubject(tenant))
	m.Header.Set(HeaderReply, inbox)
	m.Header.Set(HeaderKind, KindBundle)
	m.Header.Set(HeaderCount, strconv.Itoa(len(leaves)))
	out := make([]byte, 0, bundleSize(leaves))
	out = append(out, bundleMagic...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(leaves)))
	for _, l := range leaves {
		k, b := leafKind(l)
		out = append(out, k)
		out = binary.BigEndian.AppendUint32(out, uint32(len(b)))
		out = append(out, b...)
	}
	m.Data = out
	return m
}

// RequestLeaves is how many leaves an append request claims to carry (1 unless it is
// a bundle with a valid Svc-Count): what the sequencer counts against its batch size
// before it parses the request.
func RequestLeaves(h nats.Header) int {
	if h.Get(HeaderKind) != KindBundle {
		return 1
	}
	n, err := strconv.Atoi(h.Get(HeaderCount))
	if err != nil || n < 1 || n > MaxBundleLeaves {
		return 1
	}
	return n
}

// DecodeBundle parses a bundle's body. Its error (ErrBadBundle) is for the bundle as a
// whole; a leaf that is wrong on its own is refused in its entry.
func DecodeBundle(data []byte) ([]BundleEntry, error) {
	if len(data) > MaxBundleBytes {
		return nil, fmt.Errorf("%w: %d bytes; the limit is %d", ErrBadBundle, len(data), MaxBundleBytes)
	}
	if len(data) < 8 || string(data[:4]) != bundleMagic {
		return nil, fmt.Errorf("%w: bad header", ErrBadBundle)
	}
	count := binary.BigEndian.Uint32(data[4:8])
	rest := data[8:]
	if count == 0 || count > MaxBundleLeaves || uint64(count) > uint64(len(rest))/5 {
		return nil, fmt.Errorf("%w: %d leaves in %d bytes", ErrBadBundle, count, len(rest))
	}
	out := make([]BundleEntry, 0, count)
	for i := uint32(0); i < count; i++ {
		if len(rest) < 5 {
			return nil, fmt.Errorf("%w: leaf %d truncated", ErrBadBundle, i)
		}
		kind, n := rest[0], binary.BigEndian.Uint32(rest[1:5])
		rest = rest[5:]
		if uint64(n) > uint64(len(rest)) {
			return nil, fmt.Errorf("%w: leaf %d length %d past the end", ErrBadBundle, i, n)
		}
		body := rest[:n:n]
		rest = rest[n:]
		var e BundleEntry
		switch kind {
		case 0:
			e.Leaf, e.Err = checkLeaf(body)
		case 1:
			e.Leaf, e.Err = checkHash(body)
		default:
			return nil, fmt.Errorf("%w: leaf %d kind %d", ErrBadBundle, i, kind)
		}
		out = append(out, e)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadBundle, len(rest))
	}
	return out, nil
}

// BundleAnswer is one leaf's answer in a bundle reply.
type BundleAnswer struct {
	Inclusion []byte   // the inclusion proof's JSON; nil when refused
	Refusal   *Refusal // nil when proven
}

// EncodeBundleReply writes the reply to a bundle: head is the signed head's JSON
// (needed when any answer carries a proof).
func EncodeBundleReply(inbox string, head []byte, answers []BundleAnswer) (*nats.Msg, error) {
	n := len(bundleAnsMagic) + 8 + len(head)
	for _, a := range answers {
		n += 16 + len(a.Inclusion)
		if a.Refusal != nil {
			n += len(a.Refusal.Message)
		}
	}
	out := make([]byte, 0, n)
	out = append(out, bundleAnsMagic...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(head)))
	out = append(out, head...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(answers)))
	for _, a := range answers {
		status, retry, body := StatusOK, 0, a.Inclusion
		if a.Refusal != nil {
			reason, ok := wireReasons[a.Refusal.Reason]
			if !ok {
				return nil, fmt.Errorf("refusal with unknown reason %v", a.Refusal.Reason)
			}
			status, retry, body = reason, a.Refusal.RetryAfter, []byte(a.Refusal.Message)
		} else if len(head) == 0 {
			return nil, errors.New("bundle reply: a proof without a head")
		}
		out = append(out, byte(len(status)))
		out = append(out, status...)
		out = binary.BigEndian.AppendUint32(out, uint32(max(retry, 0)))
		out = binary.BigEndian.AppendUint32(out, uint32(len(body)))
		out = append(out, body...)
	}
	m := nats.NewMsg(inbox)
	m.Header.Set(HeaderStatus, StatusBundle)
	m.Data = out
	return m, nil
}

// DecodeBundleReply parses a bundle reply's body into the signed head's JSON and one
// answer per leaf.
func DecodeBundleReply(data []byte) (head []byte, answers []BundleAnswer, err error) {
	if len(data) < 8 || string(data[:4]) != bundleAnsMagic {
		return nil, nil, fmt.Errorf("%w: bad reply header", ErrBadBundle)
	}
	hn := binary.BigEndian.Uint32(data[4:8])
	rest := data[8:]
	if uint64(hn)+4 > uint64(len(rest)) {
		return nil, nil, fmt.Errorf("%w: head of %d bytes past the end", ErrBadBundle, hn)
	}
	head, rest = rest[:hn:hn], rest[hn:]
	count := binary.BigEndian.Uint32(rest[:4])
	rest = rest[4:]
	if count == 0 || count > MaxBundleLeaves || uint64(count) > uint64(len(rest))/10 {
		return nil, nil, fmt.Errorf("%w: %d answers in %d bytes", ErrBadBundle, count, len(rest))
	}
	answers = make([]BundleAnswer, 0, count)
	for i := uint32(0); i < count; i++ {
		if len(rest) < 1 || len(rest) < 1+int(rest[0])+8 {
			return nil, nil, fmt.Errorf("%w: answer %d truncated", ErrBadBundle, i)
		}
		status := string(rest[1 : 1+rest[0]])
		rest = rest[1+int(rest[0]):]
		retry, n := binary.BigEndian.Uint32(rest[:4]), binary.BigEndian.Uint32(rest[4:8])
		rest = rest[8:]
		if uint64(n) > uint64(len(rest)) || retry > 1<<30 {
			return nil, nil, fmt.Errorf("%w: answer %d length %d, retry %d", ErrBadBundle, i, n, retry)
		}
		body := rest[:n:n]
		rest = rest[n:]
		if status == StatusOK {
			if len(head) == 0 || len(body) == 0 || retry != 0 {
				return nil, nil, fmt.Errorf("%w: answer %d: a proof without a head, or with a Retry-After", ErrBadBundle, i)
			}
			answers = append(answers, BundleAnswer{Inclusion: body})
			continue
		}
		reason := reasonNamed(status)
		if reason == nil {
			return nil, nil, fmt.Errorf("%w: answer %d has unknown status %q", ErrBadBundle, i, status)
		}
		answers = append(answers, BundleAnswer{Refusal: &Refusal{Reason: reason, Message: string(body), RetryAfter: int(retry)}})
	}
	if len(rest) != 0 {
		return nil, nil, fmt.Errorf("%w: %d trailing bytes", ErrBadBundle, len(rest))
	}
	return head, answers, nil
}

// reasonNamed is the refusal reason a wire status names, or nil.
func reasonNamed(status string) error {
	for reason, name := range wireReasons {
		if name == status {
			return reason
		}
	}
	return nil
}

// ProofJSON joins an inclusion proof's JSON and a signed head's JSON into the answer
// of a single append ({"inclusion":...,"treeHead":...}).
func ProofJSON(inclusion, head []byte) []byte {
	b := make([]byte, 0, len(inclusion)+len(head)+28)
	b = append(b, `{"inclusion":`...)
	b = append(b, inclusion...)
	b = append(b, `,"treeHead":`...)
	b = append(b, head...)
	return append(b, '}')
}
