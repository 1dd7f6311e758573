package receipt

import (
	"bytes"
	"encoding/base64"
	"strconv"
)

// parseFileForm reads a bundle written as bundle files are (appendIndentedBundle's
// form) without encoding/json, which costs a quarter of verifying a bundle: it follows
// that exact layout and gives up (false) at the first byte that differs, and it
// accepts its result only if writing it back gives data byte for byte. Such data is
// MarshalIndent of the result, which encoding/json decodes to the same bundle, so the
// caller learns what unmarshalStrict would and that the form is exact. Anything else
// takes the general path.
func parseFileForm(data []byte) (*Bundle, bool) {
	p := fileFormParser{data: data}
	var b Bundle
	p.lit("{\n  \"envelope\": ")
	b.Envelope = p.envelope()
	p.lit(",\n  \"treeHead\": ")
	b.TreeHead = p.envelope()
	p.lit(",\n  \"inclusion\": {\n    \"leafIndex\": ")
	b.Inclusion.LeafIndex = p.uint()
	p.lit(",\n    \"treeSize\": ")
	b.Inclusion.TreeSize = p.uint()
	p.lit(",\n    \"hashes\": ")
	switch {
	case p.try("null"):
	case p.try("[]"):
		b.Inclusion.Hashes = []string{}
	default:
		p.lit("[")
		for !p.bad {
			p.lit("\n      ")
			b.Inclusion.Hashes = append(b.Inclusion.Hashes, p.str())
			if !p.try(",") {
				break
			}
		}
		p.lit("\n    ]")
	}
	p.lit("\n  }\n}\n")
	if p.bad || p.i != len(data) {
		return nil, false
	}
	if !writesBack(data, func(out []byte) ([]byte, bool) { return appendIndentedBundle(out, &b) }) {
		return nil, false
	}
	return &b, true
}

type fileFormParser struct {
	data []byte
	i    int
	bad  bool
}

func (p *fileFormParser) try(s string) bool {
	if p.bad || !bytes.HasPrefix(p.data[p.i:], []byte(s)) {
		return false
	}
	p.i += len(s)
	return true
}

func (p *fileFormParser) lit(s string) {
	if !p.try(s) {
		p.bad = true
	}
}

// str reads a string without escapes (a backslash gives up).
func (p *fileFormParser) str() string {
	return string(p.rawStr())
}

// rawStr is str's bytes, in data.
func (p *fileFormParser) rawStr() []byte {
	p.lit(`"`)
	if p.bad {
		return nil
	}
	n := bytes.IndexByte(p.data[p.i:], '"')
	if n < 0 || bytes.IndexByte(p.data[p.i:p.i+n], '\\') >= 0 {
		p.bad = true
		return nil
	}
	s := p.data[p.i : p.i+n]
	p.i += n + 1
	return s
}

func (p *fileFormParser) b64() Base64 {
	s := p.rawStr()
	if p.bad {
		return nil
	}
	enc := base64.StdEncoding.Strict()
	out := make([]byte, enc.DecodedLen(len(s)))
	n, err := enc.Decode(out, s)
	if err != nil {
		p.bad = true
		return nil
	}
	return out[:n]
}

func (p *fileFormParser) uint() uint64 {
	j := p.i
	for j < len(p.data) && p.data[j] >= '0' && p.data[j] <= '9' {
		j++
	}
	v, err := strconv.ParseUint(string(p.data[p.i:j]), 10, 64)
	if err != nil {
		p.bad = true
	}
	p.i = j
	return v
}

func (p *fileFormParser) envelope() *Envelope {
	var e Envelope
	p.lit("{\n    \"payloadType\": ")
	e.PayloadType = p.str()
	p.lit(",\n    \"payload\": ")
	e.Payload = p.b64()
	p.lit(",\n    \"signatures\": ")
	switch {
	case p.try("null"):
	case p.try("[]"):
		e.Signatures = []Signature{}
	default:
		p.lit("[")
		for !p.bad {
			var s Signature
			p.lit("\n      {\n        \"keyid\": ")
			s.KeyID = p.str()
			p.lit(",\n        \"sig\": ")
			s.Sig = p.b64()
			p.lit("\n      }")
			e.Signatures = append(e.Signatures, s)
			if !p.try(",") {
				break
			}
		}
		p.lit("\n    ]")
	}
	p.lit("\n  }")
	return &e
}
