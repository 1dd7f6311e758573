package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
)

func init() {
	register("prune", "retention: drop receipts older than a cutoff from a log file and its receipts directory", runPrune)
}

const pruneDescription = `Retention for a local log file. Every leaf whose receipt (or authorization
statement) has a timestamp before --before becomes a hash-only line
{"pruned": <leaf hash>}, and its bundle file <receipts>/<receiptId>.json (or
<receiptId>.authorization.json) is deleted. Only leaf hashes enter the tree, so
every root, tree head and inclusion proof stays valid: bundles kept elsewhere
still verify, and the log still proves it never rewrote history.

The log file is rewritten first (atomically); bundle files are deleted only after
that succeeded. A bundle file is deleted only if it holds the very envelope that
was pruned. Leaves that are not receipts are kept and counted in a warning.
Stop every process writing to the log file (gateway, sidecar, log server) first.

--before takes an RFC 3339 time (2026-01-01T00:00:00Z, any offset) or a date
(2026-01-01, meaning midnight UTC).

Example:
  svc prune --log data/log.jsonl --before 2026-01-01T00:00:00Z --receipts data/receipts`

func runPrune(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("prune", "--log <file> --before <ISO 8601> --receipts <dir>", pruneDescription, stderr)
	logPath := fs.String("log", "", "the log file to prune, rewritten in place (required)")
	before := fs.String("before", "", "cutoff: receipts with a timestamp strictly before it are pruned; RFC 3339 time or YYYY-MM-DD (required)")
	receiptsDir := fs.String("receipts", "", "the receipts directory holding <receiptId>.json bundle files (required)")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	if *logPath == "" {
		return usagef("--log is required: the log file to prune")
	}
	if *before == "" {
		return usagef("--before is required: the cutoff time, e.g. --before 2026-01-01T00:00:00Z")
	}
	cutoff, err := pruneParseCutoff(*before)
	if err != nil {
		return err
	}
	if *receiptsDir == "" {
		return usagef("--receipts is required: the directory holding the receipt bundle files")
	}
	if fi, err := os.Stat(*logPath); err != nil {
		return fmt.Errorf("--log: %w", err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("--log %s is not a regular file", *logPath)
	}
	if fi, err := os.Stat(*receiptsDir); err != nil {
		return fmt.Errorf("--receipts: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("--receipts %s is not a directory", *receiptsDir)
	}

	type target struct {
		index uint64
		file  string // bundle file name inside the receipts directory
		leaf  []byte // canonical JSON of the pruned envelope
	}
	var (
		targets    []target
		leaves     int
		newer      int
		notReceipt int
		examples   []string
	)
	skip := func(index uint64, why string) bool {
		notReceipt++
		if len(examples) < 3 {
			examples = append(examples, fmt.Sprintf("leaf %d: %s", index, why))
		}
		return false
	}
	n, err := merkle.PruneLogFile(*logPath, func(index uint64, leaf string) bool {
		leaves++
		env, err := receipt.ParseEnvelope([]byte(leaf))
		if err != nil {
			return skip(index, err.Error())
		}
		st, err := receipt.DecodeStatement(env)
		if err != nil {
			return skip(index, err.Error())
		}
		var suffix string
		switch st.PredicateType {
		case receipt.PredicateReceipt:
			suffix = ".json"
		case receipt.PredicateAuthorization:
			suffix = ".authorization.json"
		default:
			return skip(index, fmt.Sprintf("predicateType %q is neither a receipt nor an authorization", st.PredicateType))
		}
		var p struct {
			ReceiptID string `json:"receiptId"`
			Timestamp string `json:"timestamp"`
		}
		if err := json.Unmarshal(st.Predicate, &p); err != nil {
			return skip(index, "predicate: "+err.Error())
		}
		ts, err := receipt.ParseTime(p.Timestamp)
		if err != nil {
			return skip(index, "timestamp: "+err.Error())
		}
		if !ts.Before(cutoff) {
			newer++
			return false
		}
		if !pruneSafeID(p.ReceiptID) {
			return skip(index, fmt.Sprintf("receiptId %q cannot name a bundle file", p.ReceiptID))
		}
		targets = append(targets, target{index: index, file: p.ReceiptID + suffix, leaf: env.Canonical()})
		return true
	})
	if err != nil {
		return fmt.Errorf("prune %s: %w (no bundle file was deleted)", *logPath, err)
	}
	if n != len(targets) {
		fmt.Fprintf(stderr, "svc prune: warning: the log reports %d leaves pruned, %d were selected\n", n, len(targets))
	}

	// The log no longer holds the pruned leaves; now remove their bundle files.
	var deleted, absent, mismatched int
	var failed []string
	for _, t := range targets {
		path := filepath.Join(*receiptsDir, t.file)
		b, err := receipt.ReadBundle(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			absent++
			continue
		case err != nil:
			mismatched++
			fmt.Fprintf(stderr, "svc prune: warning: kept %s: %v\n", path, err)
			continue
		case !bytes.Equal(b.Envelope.Canonical(), t.leaf):
			mismatched++
			fmt.Fprintf(stderr, "svc prune: warning: kept %s: it does not hold the envelope of leaf %d\n", path, t.index)
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			failed = append(failed, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		deleted++
	}

	fmt.Fprintf(stdout, "pruned %d of %d leaves with content in %s (timestamp before %s); %d newer kept\n",
		n, leaves, *logPath, receipt.FormatTime(cutoff), newer)
	fmt.Fprintf(stdout, "deleted %d bundle files from %s", deleted, *receiptsDir)
	if absent > 0 {
		fmt.Fprintf(stdout, "; %d already absent", absent)
	}
	if mismatched > 0 {
		fmt.Fprintf(stdout, "; %d kept (see warnings)", mismatched)
	}
	fmt.Fprintln(stdout)
	if notReceipt > 0 {
		fmt.Fprintf(stderr, "svc prune: warning: kept %d leaves that do not parse as receipts (%s)\n", notReceipt, strings.Join(examples, "; "))
	}
	if len(failed) > 0 {
		return fmt.Errorf("the log was pruned but %d bundle files could not be deleted; delete them by hand: %s", len(failed), strings.Join(failed, "; "))
	}
	return nil
}

// pruneParseCutoff reads --before: any RFC 3339 time, or a date meaning midnight UTC.
func pruneParseCutoff(s string) (time.Time, error) {
	if t, err := receipt.ParseTime(s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("--before %q is not an ISO 8601 time; use RFC 3339 with a zone (2026-01-01T00:00:00Z) or a date (2026-01-01)", s)
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
