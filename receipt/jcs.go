package receipt

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// transformJCS is RFC 8785 canonicalization of JSON text. It accepts and rejects
// exactly what github.com/gowebpki/jcs.Transform does and writes the same bytes
// (FuzzTransformJCS checks both against each other), at a fraction of the cost: a
// string without escapes, such as a kilobytes-long base64 payload, is copied as it
// stands, and a short integer keeps its text. Numbers otherwise go through
// jcs.NumberToJSON, ES6 formatting.
//
// As in the reference, the input is parsed into a tree first and written once, so a
// document costs O(n) whatever its nesting (at most jcsMaxDepth).
func transformJCS(data []byte) ([]byte, error) {
	c, err := canonicalize(data, 0)
	return c.text, err
}

// canonicalJSON is JSON text in RFC 8785 form with the nesting depth of its deepest
// array or object (0 for a scalar): embedded at depth d in a larger document, it is
// that document's canonical form only if d+depth is at most jcsMaxDepth.
type canonicalJSON struct {
	text  []byte
	depth int
}

// canonicalize is transformJCS of data found inside `within` enclosing arrays and
// objects, which count towards jcsMaxDepth.
func canonicalize(data []byte, within int) (canonicalJSON, error) {
	if len(data) == 0 {
		return canonicalJSON{}, errors.New("no JSON data")
	}
	p := jcsParser{data: data, depth: within, maxDepth: within}
	root, err := p.value()
	if err != nil {
		return canonicalJSON{}, err
	}
	for ; p.i < len(data); p.i++ {
		if !isJSONSpace(data[p.i]) {
			return canonicalJSON{}, fmt.Errorf("unexpected data after the JSON value at byte %d", p.i)
		}
	}
	return canonicalJSON{text: root.append(make([]byte, 0, len(data))), depth: p.maxDepth - within}, nil
}

// jcsMaxDepth bounds the nesting of arrays and objects, as encoding/json does.
const jcsMaxDepth = 10000

type jcsKind uint8

const (
	jcsScalar jcsKind = iota
	jcsArray
	jcsObject
)

type jcsNode struct {
	kind    jcsKind
	text    []byte      // jcsScalar: the value's canonical text
	elems   []jcsNode   // jcsArray, in order
	members []jcsMember // jcsObject, sorted by name in UTF-16 code units
}

type jcsMember struct {
	name  string // decoded
	text  []byte // the name's canonical text, quoted
	value jcsNode
}

func (n *jcsNode) append(b []byte) []byte {
	switch n.kind {
	case jcsArray:
		b = append(b, '[')
		for i := range n.elems {
			if i > 0 {
				b = append(b, ',')
			}
			b = n.elems[i].append(b)
		}
		return append(b, ']')
	case jcsObject:
		b = append(b, '{')
		for i := range n.members {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, n.members[i].text...)
			b = append(b, ':')
			b = n.members[i].value.append(b)
		}
		return append(b, '}')
	}
	return append(b, n.text...)
}

type jcsParser struct {
	data     []byte
	i        int
	depth    int
	maxDepth int
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// next skips whitespace and returns the byte there without consuming it.
func (p *jcsParser) next() (byte, error) {
	for p.i < len(p.data) && isJSONSpace(p.data[p.i]) {
		p.i++
	}
	if p.i >= len(p.data) {
		return 0, errors.New("unexpected end of JSON data")
	}
	if c := p.data[p.i]; c < utf8.RuneSelf {
		return c, nil
	}
	return 0, fmt.Errorf("unexpected non-ASCII byte 0x%02x outside a string at byte %d", p.data[p.i], p.i)
}

func (p *jcsParser) value() (jcsNode, error) {
	c, err := p.next()
	if err != nil {
		return jcsNode{}, err
	}
	switch c {
	case '{':
		p.i++
		return p.object()
	case '[':
		p.i++
		return p.array()
	case '"':
		p.i++
		text, err := p.strValue()
		return jcsNode{text: text}, err
	}
	return p.simple()
}

func (p *jcsParser) enter() error {
	if p.depth++; p.depth > jcsMaxDepth {
		return fmt.Errorf("nesting deeper than %d", jcsMaxDepth)
	}
	p.maxDepth = max(p.maxDepth, p.depth)
	return nil
}

func (p *jcsParser) array() (jcsNode, error) {
	if err := p.enter(); err != nil {
		return jcsNode{}, err
	}
	defer func() { p.depth-- }()
	n := jcsNode{kind: jcsArray}
	for first := true; ; first = false {
		c, err := p.next()
		if err != nil {
			return jcsNode{}, err
		}
		if c == ']' {
			p.i++
			return n, nil
		}
		if !first {
			if c != ',' {
				return jcsNode{}, fmt.Errorf("expected ',' or ']' at byte %d, got %q", p.i, c)
			}
			p.i++
		}
		e, err := p.value()
		if err != nil {
			return jcsNode{}, err
		}
		n.elems = append(n.elems, e)
	}
}

func (p *jcsParser) object() (jcsNode, error) {
	if err := p.enter(); err != nil {
		return jcsNode{}, err
	}
	defer func() { p.depth-- }()
	n := jcsNode{kind: jcsObject}
	for first := true; ; first = false {
		c, err := p.next()
		if err != nil {
			return jcsNode{}, err
		}
		if c == '}' {
			p.i++
			break
		}
		if !first {
			if c != ',' {
				return jcsNode{}, fmt.Errorf("expected ',' or '}' at byte %d, got %q", p.i, c)
			}
			p.i++
			if c, err = p.next(); err != nil {
				return jcsNode{}, err
			}
		}
		if c != '"' {
			return jcsNode{}, fmt.Errorf("expected a member name at byte %d, got %q", p.i, c)
		}
		p.i++
		text, name, err := p.str()
		if err != nil {
			return jcsNode{}, err
		}
		if c, err = p.next(); err != nil {
			return jcsNode{}, err
		} else if c != ':' {
			return jcsNode{}, fmt.Errorf("expected ':' at byte %d, got %q", p.i, c)
		}
		p.i++
		v, err := p.value()
		if err != nil {
			return jcsNode{}, err
		}
		n.members = append(n.members, jcsMember{name: name, text: text, value: v})
	}
	slices.SortFunc(n.members, func(a, b jcsMember) int { return compareUTF16(a.name, b.name) })
	for i := 1; i < len(n.members); i++ {
		if n.members[i-1].name == n.members[i].name {
			return jcsNode{}, fmt.Errorf("duplicate member name %s", n.members[i].text[:min(len(n.members[i].text), 40)])
		}
	}
	return n, nil
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785 sorts names.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			if ua, ub := firstUTF16Unit(ra), firstUTF16Unit(rb); ua != ub {
				return int(ua) - int(ub)
			}
			return int(ra) - int(rb) // one high surrogate: the low ones order as the runes
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b) // the one that ran out first is a prefix of the other
}

func firstUTF16Unit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xD800 + (r-0x10000)>>10
}

// str reads a string after its opening quote and returns its canonical text and its
// decoded value. Without escapes the canonical text is the input itself.
func (p *jcsParser) str() (text []byte, decoded string, err error) {
	start := p.i
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			p.i++
			return p.data[start-1 : p.i], string(p.data[start : p.i-1]), nil
		case c == '\\':
			return p.escapedStr(start)
		case c < 0x20:
			return nil, "", fmt.Errorf("control character 0x%02x in a string at byte %d", c, p.i)
		case c < utf8.RuneSelf:
			p.i++
		default:
			if err := p.skipRune(); err != nil {
				return nil, "", err
			}
		}
	}
	return nil, "", errors.New("unterminated string")
}

// skipRune consumes one multi-byte UTF-8 character of a string.
func (p *jcsParser) skipRune() error {
	r, size := utf8.DecodeRune(p.data[p.i:])
	if r == utf8.RuneError && size <= 1 {
		return fmt.Errorf("invalid UTF-8 in a string at byte %d", p.i)
	}
	p.i += size
	return nil
}

// strValue reads a string value after its opening quote and returns its canonical
// text: the input itself when every escape in it is the one RFC 8785 writes (\n, \",
// \u001f...), as in most text with line breaks; otherwise what str returns.
func (p *jcsParser) strValue() ([]byte, error) {
	start := p.i
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			p.i++
			return p.data[start-1 : p.i], nil
		case c == '\\':
			n := canonicalEscape(p.data[p.i:])
			if n == 0 {
				p.i = start
				text, _, err := p.str()
				return text, err
			}
			p.i += n
		case c < 0x20:
			return nil, fmt.Errorf("control character 0x%02x in a string at byte %d", c, p.i)
		case c < utf8.RuneSelf:
			p.i++
		default:
			if err := p.skipRune(); err != nil {
				return nil, err
			}
		}
	}
	return nil, errors.New("unterminated string")
}

// canonicalEscape returns the length of the escape e starts with if appendJCSString
// writes that escape for the character it stands for, else 0.
func canonicalEscape(e []byte) int {
	if len(e) < 2 {
		return 0
	}
	switch e[1] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if len(e) < 6 || e[2] != '0' || e[3] != '0' || (e[4] != '0' && e[4] != '1') {
			return 0
		}
		v := (e[4] - '0') << 4
		switch lo := e[5]; {
		case '0' <= lo && lo <= '9':
			v |= lo - '0'
		case 'a' <= lo && lo <= 'f':
			v |= lo - 'a' + 10
		default:
			return 0
		}
		if v == '\b' || v == '\t' || v == '\n' || v == '\f' || v == '\r' {
			return 0 // written in its short form
		}
		return 6
	}
	return 0
}

// escapedStr continues str from the first backslash.
func (p *jcsParser) escapedStr(start int) ([]byte, string, error) {
	buf := append([]byte(nil), p.data[start:p.i]...)
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			p.i++
			return appendJCSString(nil, string(buf)), string(buf), nil
		case c == '\\':
			p.i++
			e, err := p.ascii()
			if err != nil {
				return nil, "", err
			}
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, err := p.hex4()
				if err != nil {
					return nil, "", err
				}
				if utf16.IsSurrogate(r) {
					if r > 0xDBFF {
						return nil, "", fmt.Errorf("lone low surrogate \\u%04x in a string", r)
					}
					b, err1 := p.ascii()
					u, err2 := p.ascii()
					if err := errors.Join(err1, err2); err != nil {
						return nil, "", err
					}
					if b != '\\' || u != 'u' {
						return nil, "", fmt.Errorf("high surrogate \\u%04x not followed by a low one", r)
					}
					lo, err := p.hex4()
					if err != nil {
						return nil, "", err
					}
					if lo < 0xDC00 || lo > 0xDFFF {
						return nil, "", fmt.Errorf("high surrogate \\u%04x followed by \\u%04x, not a low surrogate", r, lo)
					}
					r = utf16.DecodeRune(r, lo)
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return nil, "", fmt.Errorf("invalid escape \\%c in a string", e)
			}
		case c < 0x20:
			return nil, "", fmt.Errorf("control character 0x%02x in a string at byte %d", c, p.i)
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.data[p.i:])
			if r == utf8.RuneError && size <= 1 {
				return nil, "", fmt.Errorf("invalid UTF-8 in a string at byte %d", p.i)
			}
			buf = append(buf, p.data[p.i:p.i+size]...)
			p.i += size
		}
	}
	return nil, "", errors.New("unterminated string")
}

// ascii consumes one byte, which must be ASCII.
func (p *jcsParser) ascii() (byte, error) {
	if p.i >= len(p.data) {
		return 0, errors.New("unexpected end of JSON data")
	}
	c := p.data[p.i]
	if c >= utf8.RuneSelf {
		return 0, fmt.Errorf("unexpected non-ASCII byte 0x%02x at byte %d", c, p.i)
	}
	p.i++
	return c, nil
}

func (p *jcsParser) hex4() (rune, error) {
	var r rune
	for range 4 {
		c, err := p.ascii()
		if err != nil {
			return 0, err
		}
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, fmt.Errorf("invalid \\u escape: %q is not a hex digit", c)
		}
		r = r<<4 | rune(d)
	}
	return r, nil
}

// simple reads a literal or a number: the bytes up to a delimiter.
func (p *jcsParser) simple() (jcsNode, error) {
	start := p.i
	for ; p.i < len(p.data); p.i++ {
		c := p.data[p.i]
		if c == ',' || c == ']' || c == '}' || isJSONSpace(c) {
			break
		}
		if c >= utf8.RuneSelf {
			return jcsNode{}, fmt.Errorf("unexpected non-ASCII byte 0x%02x at byte %d", c, p.i)
		}
	}
	tok := p.data[start:p.i]
	switch string(tok) {
	case "":
		return jcsNode{}, fmt.Errorf("missing value at byte %d", start)
	case "true", "false", "null":
		return jcsNode{text: tok}, nil
	}
	short, ok := jsonNumber(tok)
	if !ok {
		return jcsNode{}, fmt.Errorf("invalid literal or number %q", tok[:min(len(tok), 32)])
	}
	if short && string(tok) != "-0" {
		return jcsNode{text: tok}, nil // an integer of at most 15 digits is its own ES6 form
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		return jcsNode{}, fmt.Errorf("number out of range: %q", tok[:min(len(tok), 32)])
	}
	s, err := jcs.NumberToJSON(f)
	if err != nil {
		return jcsNode{}, err
	}
	return jcsNode{text: []byte(s)}, nil
}

// jsonNumber checks the RFC 8259 number grammar,
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and reports whether the number is
// an integer of at most 15 digits (exact in a double, printed as itself by ES6).
func jsonNumber(t []byte) (shortInt, ok bool) {
	i := 0
	if i < len(t) && t[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(t) && '0' <= t[i] && t[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i >= len(t) {
		return false, false
	}
	intDigits := 1
	if t[i] == '0' {
		i++
	} else if intDigits = digits(); intDigits == 0 {
		return false, false
	}
	if i == len(t) {
		return intDigits <= 15, true
	}
	if t[i] == '.' {
		i++
		if digits() == 0 {
			return false, false
		}
	}
	if i < len(t) && (t[i] == 'e' || t[i] == 'E') {
		i++
		if i < len(t) && (t[i] == '+' || t[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false, false
		}
	}
	return false, i == len(t)
}
