package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"

	"svc.dev/svc/merkle"
)

// MaxLeafBytes caps one leaf (SPEC.md: an append body is at most 64 KB).
const MaxLeafBytes = 64 << 10

// MaxBatchBytes caps an encoded batch, below the server's max_payload.
const MaxBatchBytes = 900 << 10

// Leaf is one entry of a batch: the leaf itself, or only its hash (hash-only appends).
type Leaf struct {
	Data []byte      // the leaf, when known; nil for a hash-only append
	Hash merkle.Hash // the RFC 6962 leaf hash; always set
}

// NewLeaf hashes data.
func NewLeaf(data []byte) Leaf { return Leaf{Data: data, Hash: merkle.LeafHash(data)} }

// Batch is one commit to SVC_LEAVES: consecutive leaves starting at index First.
type Batch struct {
	First  uint64
	Leaves []Leaf
}

const batchMagic = "SVB1"

// EncodedSize is the size Encode will produce.
func (b *Batch) EncodedSize() int {
	n := len(batchMagic) + 8 + 4
	for _, l := range b.Leaves {
		n += 1 + 4
		if l.Data != nil {
			n += len(l.Data)
		} else {
			n += 32
		}
	}
	return n
}

// Encode writes the batch: "SVB1", first (uint64 BE), count (uint32 BE), then per leaf
// a kind byte (0: leaf, 1: hash), a length (uint32 BE) and the bytes.
func (b *Batch) Encode() []byte {
	out := make([]byte, 0, b.EncodedSize())
	out = append(out, batchMagic...)
	out = binary.BigEndian.AppendUint64(out, b.First)
	out = binary.BigEndian.AppendUint32(out, uint32(len(b.Leaves)))
	for _, l := range b.Leaves {
		if l.Data != nil {
			out = append(out, 0)
			out = binary.BigEndian.AppendUint32(out, uint32(len(l.Data)))
			out = append(out, l.Data...)
		} else {
			out = append(out, 1)
			out = binary.BigEndian.AppendUint32(out, 32)
			out = append(out, l.Hash[:]...)
		}
	}
	return out
}

// ErrBadBatch wraps every decoding error.
var ErrBadBatch = errors.New("malformed batch")

// DecodeBatch parses an encoded batch and hashes its leaves.
func DecodeBatch(data []byte) (*Batch, error) {
	if len(data) < 16 || string(data[:4]) != batchMagic {
		return nil, fmt.Errorf("%w: bad header", ErrBadBatch)
	}
	b := &Batch{First: binary.BigEndian.Uint64(data[4:12])}
	count := binary.BigEndian.Uint32(data[12:16])
	rest := data[16:]
	if uint64(count) > uint64(len(rest))/5 {
		return nil, fmt.Errorf("%w: %d leaves cannot fit in %d bytes", ErrBadBatch, count, len(rest))
	}
	b.Leaves = make([]Leaf, 0, count)
	for i := uint32(0); i < count; i++ {
		if len(rest) < 5 {
			return nil, fmt.Errorf("%w: leaf %d truncated", ErrBadBatch, i)
		}
		kind, n := rest[0], binary.BigEndian.Uint32(rest[1:5])
		rest = rest[5:]
		if uint64(n) > uint64(len(rest)) || n > MaxLeafBytes {
			return nil, fmt.Errorf("%w: leaf %d length %d", ErrBadBatch, i, n)
		}
		body := rest[:n]
		rest = rest[n:]
		switch kind {
		case 0:
			b.Leaves = append(b.Leaves, NewLeaf(body))
		case 1:
			if n != 32 {
				return nil, fmt.Errorf("%w: hash leaf %d has %d bytes", ErrBadBatch, i, n)
			}
			var h merkle.Hash
			copy(h[:], body)
			b.Leaves = append(b.Leaves, Leaf{Hash: h})
		default:
			return nil, fmt.Errorf("%w: leaf %d kind %d", ErrBadBatch, i, kind)
		}
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadBatch, len(rest))
	}
	return b, nil
}
