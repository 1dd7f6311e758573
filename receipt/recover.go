package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
)

// MarkFile is the file (JSON; no .json suffix, so that globs for receipts miss it), in
// a receipts directory, that records up to which leaf of the
// local log file every bundle file is on stable storage (see IssuerConfig.WriteBehind).
const MarkFile = ".svc-bundles.mark"

// maxMarkFile caps the mark file read at startup.
const maxMarkFile = 64 << 10

// bundleMark is the content of MarkFile.
type bundleMark struct {
	LogFile      string `json:"logFile"`      // absolute path of the log file the mark counts leaves of
	DurableBelow uint64 `json:"durableBelow"` // every leaf below has its bundle file on stable storage
	Root         string `json:"root"`         // the log's root at DurableBelow: a log recreated at the same path does not match
}

// parseMark reads a mark file. An error names what is wrong with it.
func parseMark(data []byte) (bundleMark, error) {
	var m bundleMark
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return bundleMark{}, fmt.Errorf("%s: %w", MarkFile, err)
	}
	if dec.More() {
		return bundleMark{}, fmt.Errorf("%s: trailing data after the JSON object", MarkFile)
	}
	if m.LogFile == "" {
		return bundleMark{}, fmt.Errorf("%s: logFile is missing", MarkFile)
	}
	if _, err := merkle.ParseHash(m.Root); err != nil {
		return bundleMark{}, fmt.Errorf("%s: root: %w", MarkFile, err)
	}
	return m, nil
}

// readMark returns where recovery must start: the recorded mark when it counts leaves
// of this log (its path, and its root at the mark), else 0 (every leaf is checked). A
// damaged mark file is reported and treated as absent.
func readMark(dir string, log *FileLog, logger *slog.Logger) uint64 {
	data, err := ReadFileCapped(filepath.Join(dir, MarkFile), maxMarkFile)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	var m bundleMark
	if err == nil {
		m, err = parseMark(data)
	}
	if err != nil {
		logger.Warn("unreadable mark of durable receipt files; checking every leaf", "dir", dir, "err", err)
		return 0
	}
	if m.LogFile != absPath(log.File().Path()) {
		logger.Info("the receipt files' mark counts another log file; checking every leaf", "mark", m.LogFile, "log", log.File().Path())
		return 0
	}
	if root, err := log.File().Tree().RootAt(m.DurableBelow); err != nil || root.String() != m.Root {
		logger.Warn("the receipt files' mark does not match the log (recreated, or cut back?); checking every leaf",
			"mark", m.DurableBelow, "size", log.File().Size())
		return 0
	}
	return m.DurableBelow
}

func writeMark(dir string, log *FileLog, below uint64) error {
	root, err := log.File().Tree().RootAt(below)
	if err != nil {
		return err
	}
	data, err := json.Marshal(bundleMark{LogFile: absPath(log.File().Path()), DurableBelow: below, Root: root.String()})
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, MarkFile), append(data, '\n'), 0o644)
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// isReceiptFileID reports whether a receipt id may name a file: 1 to 128 of letters,
// digits, - and _, the first a letter or digit (^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$,
// checked byte by byte: Begin checks every id, and the regexp cost a few µs a call).
func isReceiptFileID(id string) bool {
	if len(id) == 0 || len(id) > 128 || id[0] == '-' || id[0] == '_' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// recoverBundles checks the bundle file of every leaf of the log from the mark on and
// rewrites those a crash lost or left incomplete, from the envelope in the log and a
// proof at the log's current size. Leaves that are not this issuer's receipts or
// authorizations (another key, another payload, a hash-only or pruned line) have no
// file and are skipped. It returns the new mark: the log's size.
func recoverBundles(dir string, log *FileLog, key *signer.Key, from uint64, logger *slog.Logger) (uint64, error) {
	file := log.File()
	size := file.Size()
	if from == size {
		return size, nil
	}
	d, err := os.Open(dir) // before reading the files: syncfs reports errors from here on
	if err != nil {
		return 0, fmt.Errorf("recovering receipt files: %w", err)
	}
	defer d.Close()
	own := []signer.PublicKey{key.Public()}
	var present, rebuilt []string
	start, lastReport := time.Now(), time.Now()
	for i := from; i < size; i++ {
		if time.Since(lastReport) > 5*time.Second {
			logger.Info("checking receipt files against the log", "leaf", i, "of", size, "rebuilt", len(rebuilt))
			lastReport = time.Now()
		}
		e, err := file.Entry(i)
		if err != nil {
			return 0, fmt.Errorf("recovering receipt files: %w", err)
		}
		if e.Kind != merkle.LineLeaf {
			continue
		}
		name, env, ok := bundleFileOf(e.Leaf, own)
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		if bundleFileHolds(path, e.Leaf, i) {
			present = append(present, name) // whole, but maybe only in the page cache
			continue
		}
		proof, err := log.Prove(i)
		if err != nil {
			return 0, fmt.Errorf("recovering receipt file %s: %w", name, err)
		}
		data, err := bundleFile(&Bundle{Envelope: env, TreeHead: proof.TreeHead, Inclusion: proof.Inclusion})
		if err != nil {
			return 0, err
		}
		if err := writeFileNoSync(path, data, 0o644); err != nil {
			return 0, fmt.Errorf("recovering receipt file: %w", err)
		}
		rebuilt = append(rebuilt, name)
	}
	// Files a killed process wrote survive in the page cache without being durable:
	// the mark moves past them only after this sync.
	if err := syncDir(d, append(present, rebuilt...)); err != nil {
		return 0, fmt.Errorf("recovering receipt files: %w", err)
	}
	if len(rebuilt) > 0 {
		logger.Warn("rebuilt receipt files a crash had lost, from the log file", "files", len(rebuilt),
			"checked", size-from, "took", time.Since(start).Round(time.Millisecond))
	}
	if err := writeMark(dir, log, size); err != nil {
		return 0, fmt.Errorf("recovering receipt files: %w", err)
	}
	return size, nil
}

// bundleFileOf names the bundle file of a log leaf, if the leaf is a receipt or an
// authorization signed by one of own.
func bundleFileOf(leaf string, own []signer.PublicKey) (string, *Envelope, bool) {
	env, err := ParseEnvelope([]byte(leaf))
	if err != nil || env.PayloadType != PayloadInToto || len(env.VerifiedBy(own)) == 0 {
		return "", nil, false
	}
	st, err := DecodeStatement(env)
	if err != nil {
		return "", nil, false
	}
	var p struct {
		ReceiptID   string `json:"receiptId"`
		StatementID string `json:"statementId"`
	}
	if json.Unmarshal(st.Predicate, &p) != nil {
		return "", nil, false
	}
	switch st.PredicateType {
	case PredicateReceipt:
		return p.ReceiptID + ".json", env, isReceiptFileID(p.ReceiptID)
	case PredicateAuthorization:
		return p.ReceiptID + ".authorization.json", env, isReceiptFileID(p.ReceiptID)
	case PredicateToolDefinitions:
		return p.StatementID + ".tools.json", env, isReceiptFileID(p.StatementID)
	}
	return "", nil, false
}

// bundleFileHolds reports whether the file at path is a whole bundle of leaf at index.
func bundleFileHolds(path, leaf string, index uint64) bool {
	data, err := ReadFileCapped(path, MaxBundleSize)
	if err != nil {
		return false
	}
	b, err := ParseBundle(data)
	if err != nil {
		return false
	}
	return b.Inclusion.LeafIndex == index && bytes.Equal(b.Envelope.Canonical(), []byte(leaf))
}
