package receipt

import (
	"encoding/base64"
	"strconv"
)

// appendIndentedBundle writes b as bundle files hold it, json.MarshalIndent(b, "", "  ")
// and a newline, directly. It declines (false) any string that would need an escape,
// so what it writes has every key once, spelled exactly, and no escapes: a file equal
// to it is in exact form, which ParseBundle then need not establish by canonicalizing
// it (a tenth of a batch's time). Integers of 2^53 or more, which the canonical form
// treats apart, are declined too.
func appendIndentedBundle(dst []byte, b *Bundle) ([]byte, bool) {
	if b.Envelope == nil || b.TreeHead == nil || b.Inclusion.LeafIndex >= maxExactInt || b.Inclusion.TreeSize >= maxExactInt {
		return nil, false
	}
	dst = append(dst, "{\n  \"envelope\": "...)
	dst, ok := appendIndentedEnvelope(dst, b.Envelope)
	if !ok {
		return nil, false
	}
	dst = append(dst, ",\n  \"treeHead\": "...)
	if dst, ok = appendIndentedEnvelope(dst, b.TreeHead); !ok {
		return nil, false
	}
	dst = append(dst, ",\n  \"inclusion\": {\n    \"leafIndex\": "...)
	dst = strconv.AppendUint(dst, b.Inclusion.LeafIndex, 10)
	dst = append(dst, ",\n    \"treeSize\": "...)
	dst = strconv.AppendUint(dst, b.Inclusion.TreeSize, 10)
	dst = append(dst, ",\n    \"hashes\": "...)
	switch {
	case b.Inclusion.Hashes == nil:
		dst = append(dst, "null"...)
	case len(b.Inclusion.Hashes) == 0:
		dst = append(dst, "[]"...)
	default:
		dst = append(dst, '[')
		for i, h := range b.Inclusion.Hashes {
			if !noEscapes(h) {
				return nil, false
			}
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, "\n      \""...)
			dst = append(dst, h...)
			dst = append(dst, '"')
		}
		dst = append(dst, "\n    ]"...)
	}
	return append(dst, "\n  }\n}\n"...), true
}

func appendIndentedEnvelope(dst []byte, e *Envelope) ([]byte, bool) {
	if !noEscapes(e.PayloadType) {
		return nil, false
	}
	dst = append(dst, "{\n    \"payloadType\": \""...)
	dst = append(dst, e.PayloadType...)
	dst = append(dst, "\",\n    \"payload\": \""...)
	dst = base64.StdEncoding.AppendEncode(dst, e.Payload)
	dst = append(dst, "\",\n    \"signatures\": "...)
	switch {
	case e.Signatures == nil:
		dst = append(dst, "null"...)
	case len(e.Signatures) == 0:
		dst = append(dst, "[]"...)
	default:
		dst = append(dst, '[')
		for i, s := range e.Signatures {
			if !noEscapes(s.KeyID) {
				return nil, false
			}
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, "\n      {\n        \"keyid\": \""...)
			dst = append(dst, s.KeyID...)
			dst = append(dst, "\",\n        \"sig\": \""...)
			dst = base64.StdEncoding.AppendEncode(dst, s.Sig)
			dst = append(dst, "\"\n      }"...)
		}
		dst = append(dst, "\n    ]"...)
	}
	return append(dst, "\n  }"...), true
}

// noEscapes reports whether encoding/json writes s as it stands between quotes:
// printable ASCII without ", \, <, > and &.
func noEscapes(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
