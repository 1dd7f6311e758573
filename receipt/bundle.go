package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// MaxBundleSize caps a bundle read from disk or the network.
const MaxBundleSize = 16 << 20

// ParseBundle parses a receipt bundle (or an authorization file, which has the same
// shape), rejecting unknown fields so an edited field name is an error.
func ParseBundle(data []byte) (*Bundle, error) {
	if len(data) > MaxBundleSize {
		return nil, fmt.Errorf("bundle is %d bytes; the limit is %d", len(data), MaxBundleSize)
	}
	var b Bundle
	fileForm, exact := parseFileForm(data)
	if exact {
		b = *fileForm
	} else if err := unmarshalStrict(data, &b); err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if b.Envelope == nil {
		return nil, errors.New("bundle: envelope is missing")
	}
	if err := b.Envelope.check(); err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if b.TreeHead == nil {
		return nil, errors.New("bundle: treeHead is missing")
	}
	if err := b.TreeHead.check(); err != nil {
		return nil, fmt.Errorf("bundle: treeHead: %w", err)
	}
	if b.Inclusion.Hashes == nil {
		return nil, errors.New("bundle: inclusion.hashes is missing")
	}
	if exact {
		return &b, nil // written as bundle files are: exact by construction
	}
	if err := exactBundleForm(data, &b); err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	return &b, nil
}

// ReadBundle reads and parses a bundle file.
func ReadBundle(path string) (*Bundle, error) {
	data, err := ReadFileCapped(path, MaxBundleSize)
	if err != nil {
		return nil, err
	}
	b, err := ParseBundle(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// ReadFileCapped reads a whole file, refusing one larger than limit bytes.
func ReadFileCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Sized by the file, as os.ReadFile does: a batch reads a bundle in two reads
	// rather than io.ReadAll's growing buffer (a sixth of its time went to reads).
	size := int64(512)
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = min(fi.Size(), limit) + 1
	}
	data, err := readAllInto(io.LimitReader(f, limit+1), make([]byte, 0, size))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}

// readAllInto is io.ReadAll into b's spare capacity, growing it only when full.
func readAllInto(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// WriteFileAtomic writes data to path so that a reader (or a crash) sees the old file or
// the whole new one, never a part: a temporary file in the same directory, fsync,
// rename, fsync of the directory.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// bundleFile is the content of a bundle file: json.MarshalIndent(b, "", "  ") and a
// newline, byte for byte, without the reflection: the envelopes are written directly
// (a receipt's payload is kilobytes of base64) and indented once.
func bundleFile(b *Bundle) ([]byte, error) {
	size := 256 + len(b.Inclusion.Hashes)*68
	for _, e := range []*Envelope{b.Envelope, b.TreeHead} {
		if e != nil {
			size += len(e.Payload) * 4 / 3
		}
	}
	compact := make([]byte, 0, size)
	compact = append(compact, `{"envelope":`...)
	compact, ok1 := b.Envelope.appendJSON(compact)
	compact = append(compact, `,"treeHead":`...)
	compact, ok2 := b.TreeHead.appendJSON(compact)
	if !ok1 || !ok2 { // a string encoding/json would escape: take its way
		data, err := json.MarshalIndent(b, "", "  ")
		return append(data, '\n'), err
	}
	compact = append(compact, `,"inclusion":{"leafIndex":`...)
	compact = strconv.AppendUint(compact, b.Inclusion.LeafIndex, 10)
	compact = append(compact, `,"treeSize":`...)
	compact = strconv.AppendUint(compact, b.Inclusion.TreeSize, 10)
	compact = append(compact, `,"hashes":`...)
	if b.Inclusion.Hashes == nil {
		compact = append(compact, "null"...)
	} else {
		compact = append(compact, '[')
		for i, h := range b.Inclusion.Hashes {
			if i > 0 {
				compact = append(compact, ',')
			}
			if !plainJSONString(h) {
				data, err := json.MarshalIndent(b, "", "  ")
				return append(data, '\n'), err
			}
			compact = appendJCSString(compact, h)
		}
		compact = append(compact, ']')
	}
	compact = append(compact, "}}"...)
	out := indentPlain(make([]byte, 0, len(compact)+512), compact)
	return append(out, '\n'), nil
}

// indentPlain is json.Indent(dst, src, "", "  ") for the valid compact JSON that
// bundleFile writes: a string is copied in one piece, found by its closing quote,
// where json.Indent steps through every byte of a kilobytes-long payload.
// FuzzBundleFile checks the result against MarshalIndent.
func indentPlain(dst, src []byte) []byte {
	depth := 0
	newline := func() {
		dst = append(dst, '\n')
		for range depth {
			dst = append(dst, "  "...)
		}
	}
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '"':
			end := stringEnd(src, i)
			dst = append(dst, src[i:end]...)
			i = end - 1
		case '{', '[':
			dst = append(dst, c)
			if i+1 < len(src) && (src[i+1] == '}' || src[i+1] == ']') {
				dst = append(dst, src[i+1])
				i++
				continue
			}
			depth++
			newline()
		case '}', ']':
			depth--
			newline()
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			newline()
		case ':':
			dst = append(dst, ':', ' ')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// stringEnd returns the offset after the JSON string that starts at src[i] (a quote):
// the first quote after it not escaped by an odd run of backslashes.
func stringEnd(src []byte, i int) int {
	for j := i + 1; ; {
		k := bytes.IndexByte(src[j:], '"')
		if k < 0 {
			return len(src)
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && src[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}
