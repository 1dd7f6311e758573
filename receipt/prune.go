package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"svc.dev/svc/merkle"
)

// PruneReport says what Prune did.
type PruneReport struct {
	Leaves     int      // leaves with content the log held
	Pruned     int      // of those, turned into {"pruned": <hash>} lines
	Selected   int      // leaves selected for pruning (equals Pruned unless the file changed under Prune)
	Newer      int      // receipts at or after the cutoff, kept
	NotReceipt int      // leaves that do not parse as receipts or authorizations, kept
	Examples   []string // up to three of those, with the reason
	Deleted    int      // bundle files deleted
	Absent     int      // bundle files of pruned leaves that were already gone
	Kept       []string // bundle files kept because they do not hold the pruned envelope, with the reason
	Failed     []string // bundle files that could not be deleted, with the error
}

// Prune is the retention of a local log file (SPEC.md's log file): every leaf whose
// receipt or authorization statement has a timestamp before cutoff becomes a
// hash-only line {"pruned": <leaf hash>} (merkle.PruneLogFile, which rewrites the
// file atomically), and only then is its bundle file <receiptsDir>/<receiptId>.json
// (or .authorization.json) deleted, and only when it holds the very envelope that
// was pruned. Every root, tree head and inclusion proof stays valid.
//
// An error before the rewrite leaves everything as it was. Failures to delete a
// bundle file are reported in Failed, not as an error: the log is pruned by then.
// No other process may write the log file meanwhile.
func Prune(logPath, receiptsDir string, cutoff time.Time) (*PruneReport, error) {
	type target struct {
		index uint64
		file  string // bundle file name inside the receipts directory
		leaf  []byte // canonical JSON of the pruned envelope
	}
	var targets []target
	r := &PruneReport{}
	skip := func(index uint64, why string) bool {
		r.NotReceipt++
		if len(r.Examples) < 3 {
			r.Examples = append(r.Examples, fmt.Sprintf("leaf %d: %s", index, why))
		}
		return false
	}
	n, err := merkle.PruneLogFile(logPath, func(index uint64, leaf string) bool {
		r.Leaves++
		id, suffix, env, ts, err := pruneTarget([]byte(leaf))
		switch {
		case err != nil:
			return skip(index, err.Error())
		case !ts.Before(cutoff):
			r.Newer++
			return false
		case !pruneSafeID(id):
			return skip(index, fmt.Sprintf("receiptId %q cannot name a bundle file", id))
		}
		targets = append(targets, target{index: index, file: id + suffix, leaf: env.Canonical()})
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("prune %s: %w (no bundle file was deleted)", logPath, err)
	}
	r.Pruned, r.Selected = n, len(targets)
	for _, t := range targets {
		path := filepath.Join(receiptsDir, t.file)
		b, err := ReadBundle(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			r.Absent++
			continue
		case err != nil:
			r.Kept = append(r.Kept, fmt.Sprintf("%s: %v", path, err))
			continue
		case !bytes.Equal(b.Envelope.Canonical(), t.leaf):
			r.Kept = append(r.Kept, fmt.Sprintf("%s: it does not hold the envelope of leaf %d", path, t.index))
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.Failed = append(r.Failed, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		r.Deleted++
	}
	return r, nil
}

// pruneTarget reads a leaf as a receipt or authorization envelope: its receipt id,
// its bundle file's suffix, the envelope and the statement's timestamp.
func pruneTarget(leaf []byte) (id, suffix string, env *Envelope, ts time.Time, err error) {
	env, err = ParseEnvelope(leaf)
	if err != nil {
		return "", "", nil, time.Time{}, err
	}
	st, err := DecodeStatement(env)
	if err != nil {
		return "", "", nil, time.Time{}, err
	}
	switch st.PredicateType {
	case PredicateReceipt:
		suffix = ".json"
	case PredicateAuthorization:
		suffix = ".authorization.json"
	case PredicateToolDefinitions:
		suffix = ".tools.json"
	default:
		return "", "", nil, time.Time{}, fmt.Errorf("predicateType %q is neither a receipt, an authorization nor tool definitions", st.PredicateType)
	}
	var p struct {
		ReceiptID   string `json:"receiptId"`
		StatementID string `json:"statementId"`
		Timestamp   string `json:"timestamp"`
	}
	if err := json.Unmarshal(st.Predicate, &p); err != nil {
		return "", "", nil, time.Time{}, fmt.Errorf("predicate: %w", err)
	}
	if st.PredicateType == PredicateToolDefinitions {
		p.ReceiptID = p.StatementID
	}
	if ts, err = ParseTime(p.Timestamp); err != nil {
		return "", "", nil, time.Time{}, fmt.Errorf("timestamp: %w", err)
	}
	return p.ReceiptID, suffix, env, ts, nil
}

// pruneSafeID reports whether a receipt id can name a file inside the receipts
// directory without escaping it: letters, digits, '.', '_' and '-', not starting
// with '.'. Receipt ids are UUIDs.
func pruneSafeID(id string) bool {
	if id == "" || len(id) > 200 || id[0] == '.' {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
