package merkle

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// MaxLineSize is the largest log file line, in bytes, not counting its
// newline: 1 MiB.
const MaxLineSize = 1 << 20

// A LineKind is the kind of a log file line.
type LineKind int

const (
	// LineLeaf is a leaf, written as a JSON string: "<leaf>".
	LineLeaf LineKind = iota
	// LineHash is a leaf appended by its leaf hash: {"hash":"<64 hex>"}.
	LineHash
	// LinePruned is a leaf whose content retention removed:
	// {"pruned":"<64 hex>"}, the hex being its leaf hash.
	LinePruned
)

func (k LineKind) String() string {
	switch k {
	case LineLeaf:
		return "leaf"
	case LineHash:
		return "hash"
	case LinePruned:
		return "pruned"
	}
	return fmt.Sprintf("LineKind(%d)", int(k))
}

// An Entry is one line of a log file: one leaf of the tree.
type Entry struct {
	Kind LineKind
	// Leaf is the leaf, for Kind LineLeaf only; empty otherwise.
	Leaf string
	// Hash is the leaf hash, for every kind: LeafHash([]byte(Leaf)) for
	// LineLeaf, the hash written in the line otherwise. When appending a
	// LineLeaf entry it may be left zero and is then computed.
	Hash Hash
}

// A LineError reports a malformed line of a log file that is not its last
// line, or a line longer than MaxLineSize.
type LineError struct {
	Line   int   // line number, from 1
	Offset int64 // byte offset of the start of the line
	Err    error // what is wrong; wraps ErrMalformedLine or ErrLineTooLong
}

func (e *LineError) Error() string {
	return fmt.Sprintf("line %d (byte offset %d): %v", e.Line, e.Offset, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformedLine}, args...)...)
}

// ParseLine parses one log file line, without its newline. The line must be
// valid UTF-8 JSON of one of the three kinds (see LineKind), with optional
// JSON whitespace around and within it; objects must have exactly one key,
// "hash" or "pruned" (case-sensitive), whose value is 64 hex digits. Errors
// wrap ErrMalformedLine or ErrLineTooLong.
func ParseLine(line []byte) (Entry, error) {
	if len(line) > MaxLineSize {
		return Entry{}, fmt.Errorf("%w: %d bytes, limit %d", ErrLineTooLong, len(line), MaxLineSize)
	}
	if e, ok := parseCanonicalLine(line); ok {
		return e, nil
	}
	return parseLineSlow(line)
}

var (
	hashLinePrefix   = []byte(`{"hash":"`)
	prunedLinePrefix = []byte(`{"pruned":"`)
	hashLineSuffix   = []byte(`"}`)
)

// parseCanonicalLine parses the lines this package writes, without
// encoding/json: a JSON string whose only escapes are \" and \\ (unquoteSimple), or a
// hash or pruned object without whitespace. It reports false for anything else, which
// parseLineSlow then handles; where both succeed they agree (FuzzParseLine
// checks it).
func parseCanonicalLine(line []byte) (Entry, bool) {
	n := len(line)
	if n >= 2 && line[0] == '"' && line[n-1] == '"' {
		leaf, ok := unquoteSimple(line[1 : n-1])
		if !ok || !utf8.Valid(leaf) {
			return Entry{}, false
		}
		return Entry{Kind: LineLeaf, Leaf: string(leaf), Hash: LeafHash(leaf)}, true
	}
	var e Entry
	var hexHash []byte
	switch {
	case n == len(hashLinePrefix)+2*HashSize+len(hashLineSuffix) &&
		bytes.HasPrefix(line, hashLinePrefix) && bytes.HasSuffix(line, hashLineSuffix):
		e.Kind, hexHash = LineHash, line[len(hashLinePrefix):n-len(hashLineSuffix)]
	case n == len(prunedLinePrefix)+2*HashSize+len(hashLineSuffix) &&
		bytes.HasPrefix(line, prunedLinePrefix) && bytes.HasSuffix(line, hashLineSuffix):
		e.Kind, hexHash = LinePruned, line[len(prunedLinePrefix):n-len(hashLineSuffix)]
	default:
		return Entry{}, false
	}
	if _, err := hex.Decode(e.Hash[:], hexHash); err != nil {
		return Entry{}, false
	}
	return e, true
}

// unquoteSimple is the text of a JSON string's body whose only escapes are \" and
// \\ (a leaf that is itself JSON, such as a receipt's envelope, has quotes in it);
// false for a body with any other escape, a bare quote or a control character. A
// body without escapes is returned as it is.
func unquoteSimple(body []byte) ([]byte, bool) {
	var out []byte
	last := 0
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !lineSpecial[c] {
			continue
		}
		if c != '\\' || i+1 == len(body) || (body[i+1] != '"' && body[i+1] != '\\') {
			return nil, false // a bare quote, a control character, another escape
		}
		if out == nil {
			out = make([]byte, 0, len(body))
		}
		out = append(out, body[last:i]...)
		i++
		last = i // the escaped byte starts the next span
	}
	if out == nil {
		return body, true
	}
	return append(out, body[last:]...), true
}

// appendQuoted appends leaf as a JSON string, as encoding/json writes it without HTML
// escaping, when leaf needs no escape but \" and \\ (false: nothing appended). leaf is
// valid UTF-8; encoding/json would also escape control characters, U+2028 and U+2029
// (E2 80 A8 and E2 80 A9).
func appendQuoted(dst []byte, leaf string) ([]byte, bool) {
	start := len(dst)
	dst = append(dst, '"')
	last := 0
	for i := 0; i < len(leaf); i++ {
		c := leaf[i]
		if !lineSpecial[c] && c != 0xe2 {
			continue
		}
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, leaf[last:i]...)
			dst = append(dst, '\\')
			last = i // the byte itself starts the next span
		case c == 0xe2:
			if i+2 < len(leaf) && leaf[i+1] == 0x80 && (leaf[i+2] == 0xa8 || leaf[i+2] == 0xa9) {
				return dst[:start], false
			}
		default:
			return dst[:start], false
		}
	}
	dst = append(dst, leaf[last:]...)
	return append(dst, '"'), true
}

// lineSpecial marks the bytes a leaf line's string cannot hold as they are: control
// characters, the quote and the backslash.
var lineSpecial = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// parseLineSlow is ParseLine with encoding/json, for every valid form.
func parseLineSlow(line []byte) (Entry, error) {
	if !utf8.Valid(line) {
		return Entry{}, malformed("not valid UTF-8")
	}
	if bytes.IndexByte(line, '\n') >= 0 {
		return Entry{}, malformed("contains a newline")
	}
	trimmed := bytes.TrimLeft(line, " \t\r")
	if len(trimmed) == 0 {
		return Entry{}, malformed("empty line")
	}
	switch trimmed[0] {
	case '"':
		var s string
		if err := json.Unmarshal(line, &s); err != nil {
			return Entry{}, malformed("leaf string: %v", err)
		}
		return Entry{Kind: LineLeaf, Leaf: s, Hash: LeafHash([]byte(s))}, nil
	case '{':
		return parseObjectLine(line)
	}
	return Entry{}, malformed(`want a JSON string or {"hash":...} or {"pruned":...}`)
}

func parseObjectLine(line []byte) (Entry, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil { // '{', checked by the caller
		return Entry{}, malformed("%v", err)
	}
	tok, err := dec.Token()
	if err != nil {
		return Entry{}, malformed("%v", err)
	}
	key, ok := tok.(string)
	if !ok {
		return Entry{}, malformed(`empty object, want key "hash" or "pruned"`)
	}
	var e Entry
	switch key {
	case "hash":
		e.Kind = LineHash
	case "pruned":
		e.Kind = LinePruned
	default:
		return Entry{}, malformed(`unknown key %.40q, want "hash" or "pruned"`, key)
	}
	tok, err = dec.Token()
	if err != nil {
		return Entry{}, malformed("%v", err)
	}
	s, ok := tok.(string)
	if !ok {
		return Entry{}, malformed("value of %q is not a string", key)
	}
	if e.Hash, err = ParseHash(s); err != nil {
		return Entry{}, malformed("value of %q: %v", key, err)
	}
	tok, err = dec.Token()
	if err != nil {
		return Entry{}, malformed("%v", err)
	}
	if tok != json.Delim('}') {
		return Entry{}, malformed("object has more than one key")
	}
	if _, err := dec.Token(); err != io.EOF {
		return Entry{}, malformed("data after the object")
	}
	return e, nil
}

// appendLine appends e's line and its newline to dst and returns the leaf
// hash. Leaf lines are JSON strings without HTML escaping; the leaf must be
// valid UTF-8 (encoding/json would replace invalid bytes, changing the leaf
// hash on reopen).
func appendLine(dst []byte, e Entry) ([]byte, Hash, error) {
	start := len(dst)
	switch e.Kind {
	case LineLeaf:
		if !utf8.ValidString(e.Leaf) {
			return dst, Hash{}, fmt.Errorf("%w: leaf is not valid UTF-8", ErrInvalidLeaf)
		}
		h := LeafHash([]byte(e.Leaf))
		if e.Hash != (Hash{}) && e.Hash != h {
			return dst, Hash{}, fmt.Errorf("%w: entry hash %s is not the leaf hash %s of its leaf", ErrInvalidLeaf, e.Hash, h)
		}
		if len(e.Leaf)+2 > MaxLineSize { // cheap early check; escaping only grows it
			return dst, Hash{}, fmt.Errorf("%w: leaf of %d bytes, line limit %d", ErrLineTooLong, len(e.Leaf), MaxLineSize)
		}
		if quoted, ok := appendQuoted(dst, e.Leaf); ok {
			dst = append(quoted, '\n')
		} else {
			b := bytes.NewBuffer(dst)
			enc := json.NewEncoder(b)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(e.Leaf); err != nil { // appends '\n'
				return dst, Hash{}, err
			}
			dst = b.Bytes()
		}
		if n := len(dst) - start - 1; n > MaxLineSize {
			return dst[:start], Hash{}, fmt.Errorf("%w: leaf line of %d bytes, limit %d", ErrLineTooLong, n, MaxLineSize)
		}
		return dst, h, nil
	case LineHash, LinePruned:
		if e.Leaf != "" {
			return dst, Hash{}, fmt.Errorf("%w: %s entry has a leaf", ErrInvalidLeaf, e.Kind)
		}
		dst = append(dst, `{"`...)
		dst = append(dst, e.Kind.String()...)
		dst = append(dst, `":"`...)
		dst = append(dst, e.Hash.String()...)
		dst = append(dst, "\"}\n"...)
		return dst, e.Hash, nil
	}
	return dst, Hash{}, fmt.Errorf("%w: unknown line kind %d", ErrInvalidLeaf, int(e.Kind))
}

// tornError is a bad last line: a line without a newline at the end of the
// file, or a malformed line that ends the file.
type tornError struct {
	line   int
	offset int64
	size   int64 // bytes from offset to the end of the file
	reason error
}

func (e *tornError) Error() string {
	return fmt.Sprintf("%v: line %d at byte offset %d (%d bytes): %v", ErrTornLine, e.line, e.offset, e.size, e.reason)
}

func (e *tornError) Unwrap() error { return ErrTornLine }

// lineScanner reads the lines of a log file and parses them.
type lineScanner struct {
	r    *bufio.Reader
	off  int64  // byte offset of the next line
	num  int    // number of lines read
	long []byte // a line longer than the bufio buffer, assembled
}

func newLineScanner(r io.Reader) *lineScanner {
	return &lineScanner{r: bufio.NewReaderSize(r, 64<<10)}
}

// scannedLine is one line. raw is the line without its newline, valid until
// the next call of next.
type scannedLine struct {
	entry Entry
	raw   []byte
	start int64
}

// next returns the next line. At the end of the input it returns io.EOF. A
// bad last line gives a *tornError, any other bad line a *LineError, and a
// read error is returned as is.
func (s *lineScanner) next() (scannedLine, error) {
	var line []byte
	terminated := false
	s.long = s.long[:0]
	for first := true; ; first = false {
		chunk, err := s.r.ReadSlice('\n')
		if first && err == nil {
			line, terminated = chunk, true // the common case: no copy
			break
		}
		if len(s.long)+len(chunk) > MaxLineSize+1 {
			return scannedLine{}, &LineError{Line: s.num + 1, Offset: s.off,
				Err: fmt.Errorf("%w: more than %d bytes", ErrLineTooLong, MaxLineSize)}
		}
		s.long = append(s.long, chunk...)
		if err == nil {
			line, terminated = s.long, true
			break
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			line = s.long
			break
		}
		return scannedLine{}, err
	}
	if len(line) == 0 {
		return scannedLine{}, io.EOF
	}
	start := s.off
	s.num++
	s.off += int64(len(line))
	raw := line
	if terminated {
		raw = line[:len(line)-1]
	}
	if len(raw) > MaxLineSize {
		return scannedLine{}, &LineError{Line: s.num, Offset: start,
			Err: fmt.Errorf("%w: %d bytes, limit %d", ErrLineTooLong, len(raw), MaxLineSize)}
	}
	e, err := ParseLine(raw)
	if !terminated {
		if err == nil {
			err = errors.New("no newline at the end of the file")
		}
		return scannedLine{}, &tornError{line: s.num, offset: start, size: int64(len(line)), reason: err}
	}
	if err != nil {
		if _, perr := s.r.Peek(1); perr == io.EOF {
			return scannedLine{}, &tornError{line: s.num, offset: start, size: int64(len(line)), reason: err}
		} else if perr != nil {
			return scannedLine{}, perr
		}
		return scannedLine{}, &LineError{Line: s.num, Offset: start, Err: err}
	}
	return scannedLine{entry: e, raw: raw, start: start}, nil
}

// ReadLogFile parses a whole log file with the validation of OpenLogFile,
// without repairing anything. A malformed line that is not the last, or any
// line over MaxLineSize, is an error (a *LineError naming the line) and
// ReadLogFile returns no entries. A bad last line, as a crash leaves it (no
// newline, or malformed at the end of the input), gives the entries before
// it together with an error wrapping ErrTornLine.
func ReadLogFile(r io.Reader) ([]Entry, error) {
	s := newLineScanner(r)
	var entries []Entry
	for {
		l, err := s.next()
		if err == io.EOF {
			return entries, nil
		}
		if errors.Is(err, ErrTornLine) {
			return entries, err
		}
		if err != nil {
			return nil, err
		}
		entries = append(entries, l.entry)
	}
}
