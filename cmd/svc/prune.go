package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

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

	r, err := receipt.Prune(*logPath, *receiptsDir, cutoff)
	if err != nil {
		return err
	}
	if r.Pruned != r.Selected {
		fmt.Fprintf(stderr, "svc prune: warning: the log reports %d leaves pruned, %d were selected\n", r.Pruned, r.Selected)
	}
	for _, k := range r.Kept {
		fmt.Fprintf(stderr, "svc prune: warning: kept %s\n", k)
	}
	fmt.Fprintf(stdout, "pruned %d of %d leaves with content in %s (timestamp before %s); %d newer kept\n",
		r.Pruned, r.Leaves, *logPath, receipt.FormatTime(cutoff), r.Newer)
	fmt.Fprintf(stdout, "deleted %d bundle files from %s", r.Deleted, *receiptsDir)
	if r.Absent > 0 {
		fmt.Fprintf(stdout, "; %d already absent", r.Absent)
	}
	if len(r.Kept) > 0 {
		fmt.Fprintf(stdout, "; %d kept (see warnings)", len(r.Kept))
	}
	fmt.Fprintln(stdout)
	if r.NotReceipt > 0 {
		fmt.Fprintf(stderr, "svc prune: warning: kept %d leaves that do not parse as receipts (%s)\n", r.NotReceipt, strings.Join(r.Examples, "; "))
	}
	if len(r.Failed) > 0 {
		return fmt.Errorf("the log was pruned but %d bundle files could not be deleted; delete them by hand: %s", len(r.Failed), strings.Join(r.Failed, "; "))
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
