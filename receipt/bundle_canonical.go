package receipt

import (
	"bytes"
	"errors"
	"strconv"
)

// maxExactInt is 2^53: integers below it are written as their digits by RFC 8785's
// ES6 number formatting; larger ones take the general path.
const maxExactInt = 1 << 53

// appendCanonicalBundle writes Canonical(b) directly (members sorted: envelope,
// inclusion {hashes, leafIndex, treeSize}, treeHead), without a JSON round trip; a
// verifier checks every bundle's form against it. It declines (false) what the direct
// writers decline and integers of 2^53 or more.
func appendCanonicalBundle(dst []byte, b *Bundle) ([]byte, bool) {
	if b.Envelope == nil || b.TreeHead == nil || b.Inclusion.LeafIndex >= maxExactInt || b.Inclusion.TreeSize >= maxExactInt {
		return nil, false
	}
	dst = append(dst, `{"envelope":`...)
	dst, ok := b.Envelope.appendCanonical(dst)
	if !ok {
		return nil, false
	}
	dst = append(dst, `,"inclusion":{"hashes":`...)
	if b.Inclusion.Hashes == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, h := range b.Inclusion.Hashes {
			if !plainJSONString(h) {
				return nil, false
			}
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJCSString(dst, h)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"leafIndex":`...)
	dst = strconv.AppendUint(dst, b.Inclusion.LeafIndex, 10)
	dst = append(dst, `,"treeSize":`...)
	dst = strconv.AppendUint(dst, b.Inclusion.TreeSize, 10)
	dst = append(dst, `},"treeHead":`...)
	if dst, ok = b.TreeHead.appendCanonical(dst); !ok {
		return nil, false
	}
	return append(dst, '}'), true
}

// exactBundleForm is exactForm for a bundle, with the bundle's side written directly.
func exactBundleForm(data []byte, b *Bundle) error {
	out, ok := appendCanonicalBundle(make([]byte, 0, len(data)), b)
	if !ok {
		return exactForm(data, b)
	}
	in, err := CanonicalizeJSON(data)
	if err != nil {
		return err
	}
	if !bytes.Equal(in, out) {
		return errors.New("fields not written exactly as specified (case, duplicates, nulls or missing fields)")
	}
	return nil
}
