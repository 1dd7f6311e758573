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
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
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
	var out bytes.Buffer
	out.Grow(len(compact) + 256)
	if err := json.Indent(&out, compact, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}
