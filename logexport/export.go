// Package logexport is the tenant export of SPEC.md (`svc log-export`): it copies a
// tenant's log out of a log server and checks, before writing anything, that the copy
// adds up: the live head and every published checkpoint verify against the log's
// published keys, and the leaf hashes, rebuilt into a Merkle tree, give the head's root
// at the head's size and each checkpoint's root at its size.
//
// Files written to the output directory (only when everything adds up):
//
//	log.jsonl         the tenant's log as a SPEC.md log file, one line per leaf. The
//	                  tenant route /t/<tenant>/leaves returns leaf hashes, not leaves, so
//	                  every line is {"hash":"<64 hex>"} (the "appended by hash" line kind):
//	                  the file rebuilds the same tree, and `svc verify --log` and
//	                  `svc audit --log` accept it, but it does not hold receipt contents
//	head.json         the /head answer, { treeHead }
//	keys.json         the key document, as published
//	checkpoints.json  the /checkpoints answer, { checkpoints: [...] }
//	usage.json        /t/<tenant>/usage for the current month
//	audit.json        /t/<tenant>/audit (newest first, up to 1000 entries)
//	export.json       the summary: tenant, logId, treeSize, rootHash, exportedAt, counts,
//	                  the checks, and every file with its size and SHA-256
//
// Leaves are fetched in pages of 10,000 with the tenant's bearer token; the tree is
// rebuilt in a file-backed store, so memory stays flat as the log grows.
package logexport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/merkle"
	"svc.dev/svc/monitor"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// PageSize is the leaves page asked for (SPEC.md's maximum).
const PageSize = 10000

// Result lines.
const (
	AddsUp       = "EXPORT ADDS UP"
	DoesNotAddUp = "EXPORT DOES NOT ADD UP"
)

// Check names.
const (
	CheckKeys             = "key document"
	CheckCheckpointSigs   = "checkpoint signatures"
	CheckHeadSignature    = "head signature"
	CheckLeaves           = "leaves"
	CheckHeadRoot         = "leaves hash to the head's root"
	CheckCheckpointRoots  = "leaves hash to every checkpoint's root"
	CheckUsage            = "usage"
	CheckAudit            = "audit trail"
	maxDocument           = 8 << 20
	maxCheckpointList     = 512 << 20
	maxLeavesPage         = 2 << 20 // 10,000 hashes of 67 bytes, and the envelope
	leafFormatDescription = `one {"hash":"<64 hex>"} line per leaf (SPEC.md log file, leaf appended by hash): the leaves route returns leaf hashes`
)

// Options configure an export.
type Options struct {
	LogURL   string
	Tenant   string
	Token    string
	Out      string
	Client   *http.Client
	Progress io.Writer // progress lines; nil: none
	Now      func() time.Time
	PageSize uint64 // default PageSize
}

// Check is one verified property.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// FileSum names a written file.
type FileSum struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Counts summarises the export.
type Counts struct {
	Leaves       uint64 `json:"leaves"`
	Checkpoints  int    `json:"checkpoints"`
	Keys         int    `json:"keys"`
	AuditEntries int    `json:"auditEntries"`
}

// Summary is export.json.
type Summary struct {
	Tenant     string    `json:"tenant"`
	LogID      string    `json:"logId"`
	LogURL     string    `json:"logUrl"`
	TreeSize   uint64    `json:"treeSize"`
	RootHash   string    `json:"rootHash"`
	ExportedAt string    `json:"exportedAt"`
	LeafFormat string    `json:"leafFormat"`
	Counts     Counts    `json:"counts"`
	Checks     []Check   `json:"checks"`
	Files      []FileSum `json:"files"`
}

// Result is the outcome: OK when everything adds up (and the files were written).
type Result struct {
	OK      bool
	Checks  []Check
	Summary *Summary // when OK
}

// Failed lists the failed checks.
func (r *Result) Failed() []Check {
	return slices.DeleteFunc(slices.Clone(r.Checks), func(c Check) bool { return c.OK })
}

// WriteText prints the checks and the result line: EXPORT ADDS UP: ..., or exactly
// EXPORT DOES NOT ADD UP followed by what failed.
func (r *Result) WriteText(w io.Writer) error {
	bw := &errWriter{w: w}
	for _, c := range r.Checks {
		word := "PASS"
		if !c.OK {
			word = "FAIL"
		}
		fmt.Fprintf(bw, "%s %s: %s\n", word, c.Name, c.Detail)
	}
	if r.OK {
		s := r.Summary
		fmt.Fprintf(bw, "%s: tenant %s, %d leaves, root %s at size %d, %d checkpoints, %d files with SHA-256 in export.json\n",
			AddsUp, s.Tenant, s.Counts.Leaves, s.RootHash, s.TreeSize, s.Counts.Checkpoints, len(s.Files))
	} else {
		fmt.Fprintln(bw, DoesNotAddUp)
		for _, c := range r.Failed() {
			fmt.Fprintf(bw, "  failed: %s: %s\n", c.Name, c.Detail)
		}
	}
	return bw.err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

type run struct {
	opts   Options
	res    *Result
	base   string // public routes of the tenant
	routes string // tenant routes (/t/<tenant>)
	tmp    string
	files  map[string][]byte // small files to write on success
}

// Run exports opts.Tenant. An error means the export could not start (bad options, an
// output directory that cannot be written); everything that goes wrong after that is
// a failed check in the Result.
func Run(ctx context.Context, opts Options) (*Result, error) {
	var err error
	if opts.LogURL, err = client.CheckBaseURL("log URL", opts.LogURL); err != nil {
		return nil, err
	}
	if !client.ValidTenant(opts.Tenant) {
		return nil, fmt.Errorf("tenant %q: use 1 to 63 of a-z, 0-9, - and _", opts.Tenant)
	}
	if opts.Out == "" {
		return nil, errors.New("no output directory")
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: client.FetchTimeout}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PageSize == 0 || opts.PageSize > PageSize {
		opts.PageSize = PageSize
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(opts.Out, ".export-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	r := &run{opts: opts, res: &Result{}, base: client.TenantBase(opts.LogURL, opts.Tenant),
		routes: opts.LogURL + "/t/" + url.PathEscape(opts.Tenant), tmp: tmp, files: map[string][]byte{}}
	sum := r.export(ctx)
	if len(r.res.Failed()) > 0 {
		return r.res, nil
	}
	if err := r.writeOut(sum); err != nil {
		r.add(Check{Name: "write files", Detail: err.Error()})
		return r.res, nil
	}
	r.res.OK, r.res.Summary = true, sum
	return r.res, nil
}

func (r *run) add(c Check) bool {
	r.res.Checks = append(r.res.Checks, c)
	return c.OK
}

func (r *run) fail(name string, err error) *Summary {
	r.add(Check{Name: name, Detail: err.Error()})
	return nil
}

func (r *run) get(ctx context.Context, u string, limit int64, auth bool) ([]byte, error) {
	var h http.Header
	if auth {
		h = http.Header{"Authorization": {"Bearer " + r.opts.Token}}
	}
	return client.Fetch(ctx, r.opts.Client, u, limit, h)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// export runs every check; it returns the summary (files not yet listed) when all
// passed.
func (r *run) export(ctx context.Context) *Summary {
	doc, keys, err := r.keys(ctx)
	if err != nil {
		return r.fail(CheckKeys, err)
	}
	// Checkpoints, before the head, so that the head is at least as large.
	cps, err := r.checkpoints(ctx, keys, doc.Log)
	if err != nil {
		return r.fail(CheckCheckpointSigs, err)
	}
	th, err := r.head(ctx, keys, doc.Log)
	if err != nil {
		return r.fail(CheckHeadSignature, err)
	}
	if n := len(cps); n > 0 && cps[n-1].Head.TreeSize > th.TreeSize {
		return r.fail(CheckCheckpointRoots, fmt.Errorf("checkpoint at size %d is beyond the live head at size %d", cps[n-1].Head.TreeSize, th.TreeSize))
	}
	if !r.leaves(ctx, th, cps) { // rebuilt into a tree
		return nil
	}
	if err := r.usage(ctx); err != nil {
		return r.fail(CheckUsage, err)
	}
	entries, err := r.audit(ctx)
	if err != nil {
		return r.fail(CheckAudit, err)
	}
	return &Summary{Tenant: r.opts.Tenant, LogID: th.Log, LogURL: r.opts.LogURL, TreeSize: th.TreeSize, RootHash: th.RootHash,
		LeafFormat: leafFormatDescription,
		Counts:     Counts{Leaves: th.TreeSize, Checkpoints: len(cps), Keys: len(keys), AuditEntries: entries}}
}

// keys fetches the tenant's key document (CheckKeys).
func (r *run) keys(ctx context.Context) (*signer.KeyDocument, []signer.PublicKey, error) {
	docURL := client.KeyDocumentURL(r.opts.LogURL, r.opts.Tenant)
	data, err := r.get(ctx, docURL, signer.MaxKeyDocumentSize, false)
	if err != nil {
		return nil, nil, err
	}
	doc, err := signer.ParseKeyDocument(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", docURL, err)
	}
	keys, _ := doc.PublicKeys()
	r.add(Check{Name: CheckKeys, OK: true, Detail: fmt.Sprintf("%d key(s) from %s", len(keys), docURL)})
	r.files["keys.json"] = data
	return doc, keys, nil
}

// checkpoints fetches every published checkpoint and verifies each signature
// (CheckCheckpointSigs); they come back in ascending size.
func (r *run) checkpoints(ctx context.Context, keys []signer.PublicKey, logID string) ([]*client.Checkpoint, error) {
	cpURL := r.base + "/checkpoints?since=0"
	data, err := r.get(ctx, cpURL, maxCheckpointList, false)
	if err != nil {
		return nil, err
	}
	cps, err := monitor.ParseCheckpointList(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cpURL, err)
	}
	for _, cp := range cps {
		if err := verify(cp.File.Envelope, cp.Head, keys, logID); err != nil {
			return nil, fmt.Errorf("checkpoint at size %d: %w", cp.Head.TreeSize, err)
		}
	}
	sort.SliceStable(cps, func(i, j int) bool { return cps[i].Head.TreeSize < cps[j].Head.TreeSize })
	r.add(Check{Name: CheckCheckpointSigs, OK: true, Detail: fmt.Sprintf("%d checkpoint(s), every one signed by a published key", len(cps))})
	r.files["checkpoints.json"] = data
	return cps, nil
}

// head fetches and verifies the live head (CheckHeadSignature).
func (r *run) head(ctx context.Context, keys []signer.PublicKey, logID string) (*receipt.TreeHead, error) {
	data, err := r.get(ctx, r.base+"/head", maxDocument, false)
	if err != nil {
		return nil, err
	}
	env, th, err := monitor.ParseHeadAnswer(data)
	if err != nil {
		return nil, fmt.Errorf("%s/head: %w", r.base, err)
	}
	if err := verify(env, th, keys, logID); err != nil {
		return nil, fmt.Errorf("head at size %d: %w", th.TreeSize, err)
	}
	r.add(Check{Name: CheckHeadSignature, OK: true, Detail: fmt.Sprintf("size %d root %s", th.TreeSize, th.RootHash)})
	r.files["head.json"] = data
	return th, nil
}

// usage fetches the tenant's usage (CheckUsage).
func (r *run) usage(ctx context.Context) error {
	data, err := r.get(ctx, r.routes+"/usage", maxDocument, true)
	if err == nil && !json.Valid(data) {
		err = errors.New("usage answer is not JSON")
	}
	if err != nil {
		return err
	}
	r.add(Check{Name: CheckUsage, OK: true, Detail: string(compact(data))})
	r.files["usage.json"] = data
	return nil
}

// audit fetches the tenant's audit trail (CheckAudit) and returns its length.
func (r *run) audit(ctx context.Context) (int, error) {
	data, err := r.get(ctx, r.routes+"/audit?limit=1000", maxDocument, true)
	var audit struct {
		Entries []json.RawMessage `json:"entries"`
	}
	if err == nil {
		if err = json.Unmarshal(data, &audit); err == nil && audit.Entries == nil {
			err = errors.New("audit answer has no entries list")
		}
	}
	if err != nil {
		return 0, err
	}
	r.add(Check{Name: CheckAudit, OK: true, Detail: fmt.Sprintf("%d entries", len(audit.Entries))})
	r.files["audit.json"] = data
	return len(audit.Entries), nil
}

func compact(b []byte) []byte {
	var out []byte
	if c, err := receipt.CanonicalizeJSON(b); err == nil {
		out = c
	} else {
		out = b
	}
	return []byte(truncate(string(out), 200))
}

func verify(env *receipt.Envelope, th *receipt.TreeHead, keys []signer.PublicKey, logID string) error {
	if _, err := env.Verify(keys); err != nil {
		return err
	}
	if logID != "" && th.Log != logID {
		return fmt.Errorf("names log %q; the key document is log %q's", th.Log, logID)
	}
	return nil
}

// LeavesPage is a /t/<tenant>/leaves answer.
type LeavesPage struct {
	Since  uint64
	Size   uint64
	Leaves []merkle.Hash
}

// ParseLeavesPage parses { since, size, leaves: [hex] }.
func ParseLeavesPage(data []byte) (*LeavesPage, error) {
	var p struct {
		Since  *uint64  `json:"since"`
		Size   *uint64  `json:"size"`
		Leaves []string `json:"leaves"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	if p.Since == nil || p.Size == nil || p.Leaves == nil {
		return nil, errors.New("want { since, size, leaves }")
	}
	if *p.Since > *p.Size || uint64(len(p.Leaves)) > *p.Size-*p.Since {
		return nil, fmt.Errorf("%d leaves from %d is beyond the size %d it states", len(p.Leaves), *p.Since, *p.Size)
	}
	out := &LeavesPage{Since: *p.Since, Size: *p.Size, Leaves: make([]merkle.Hash, len(p.Leaves))}
	for i, s := range p.Leaves {
		h, err := merkle.ParseHash(s)
		if err != nil {
			return nil, fmt.Errorf("leaf %d: %w", *p.Since+uint64(i), err)
		}
		out.Leaves[i] = h
	}
	return out, nil
}

// leaves fetches every leaf hash up to the head's size, writes log.jsonl (in the
// temporary directory) and compares the rebuilt roots.
func (r *run) leaves(ctx context.Context, th *receipt.TreeHead, cps []*client.Checkpoint) bool {
	store, err := merkle.OpenFileStore(filepath.Join(r.tmp, "tree"))
	if err != nil {
		r.fail(CheckLeaves, err)
		return false
	}
	defer store.Close()
	tree, err := merkle.NewTree(store)
	if err != nil {
		r.fail(CheckLeaves, err)
		return false
	}
	lw, err := merkle.OpenLineWriter(filepath.Join(r.tmp, "log.jsonl"), nil)
	if err != nil {
		r.fail(CheckLeaves, err)
		return false
	}
	defer lw.Close()
	roots := &checkpointRoots{cps: cps}
	roots.compare(tree) // a checkpoint at size 0
	pages := 0
	start := time.Now()
	for tree.Size() < th.TreeSize {
		leaves, err := r.page(ctx, tree.Size(), th.TreeSize)
		if err != nil {
			r.fail(CheckLeaves, err)
			return false
		}
		entries := make([]merkle.Entry, len(leaves))
		for i, h := range leaves {
			entries[i] = merkle.Entry{Kind: merkle.LineHash, Hash: h}
			if _, err := tree.Append(h); err != nil {
				r.fail(CheckLeaves, err)
				return false
			}
			roots.compare(tree)
		}
		if err := lw.Append(entries); err != nil {
			r.fail(CheckLeaves, err)
			return false
		}
		pages++
		fmt.Fprintf(r.opts.Progress, "leaves %d/%d (%.0f%%)\n", tree.Size(), th.TreeSize, 100*float64(tree.Size())/float64(max(th.TreeSize, 1)))
	}
	r.add(Check{Name: CheckLeaves, OK: true, Detail: fmt.Sprintf("%d leaf hashes in %d page(s), %s", tree.Size(), pages, time.Since(start).Round(time.Millisecond))})
	root := tree.Root()
	ok := r.add(Check{Name: CheckHeadRoot, OK: root.String() == th.RootHash,
		Detail: fmt.Sprintf("rebuilt root %s at size %d; the head signed %s", root, th.TreeSize, th.RootHash)})
	return roots.check(r) && ok
}

// page fetches the leaf hashes from since on (at most up to size) and checks the
// page is the one asked for.
func (r *run) page(ctx context.Context, since, size uint64) ([]merkle.Hash, error) {
	u := fmt.Sprintf("%s/leaves?since=%d&limit=%d", r.routes, since, r.opts.PageSize)
	data, err := r.get(ctx, u, maxLeavesPage, true)
	if err != nil {
		return nil, err
	}
	page, err := ParseLeavesPage(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	switch {
	case page.Since != since:
		return nil, fmt.Errorf("%s: asked for leaves from %d, got them from %d", u, since, page.Since)
	case page.Size < size:
		return nil, fmt.Errorf("%s: the log now says it holds %d leaves, fewer than its head's %d", u, page.Size, size)
	case len(page.Leaves) == 0:
		return nil, fmt.Errorf("%s: no leaves, with %d still to come", u, size-since)
	}
	return page.Leaves[:min(uint64(len(page.Leaves)), size-since)], nil
}

// checkpointRoots compares each published checkpoint with the rebuilt tree's root
// when the tree reaches its size.
type checkpointRoots struct {
	cps        []*client.Checkpoint // ascending size
	next       int                  // the next checkpoint to compare
	matched    int
	mismatches []string
}

func (c *checkpointRoots) compare(tree *merkle.Tree) {
	for c.next < len(c.cps) && c.cps[c.next].Head.TreeSize == tree.Size() {
		if root := tree.Root(); root.String() != c.cps[c.next].Head.RootHash {
			c.mismatches = append(c.mismatches, fmt.Sprintf("at size %d the leaves give root %s; the checkpoint signed %s", tree.Size(), root, c.cps[c.next].Head.RootHash))
		} else {
			c.matched++
		}
		c.next++
	}
}

// check records CheckCheckpointRoots: every checkpoint was reached and matched.
func (c *checkpointRoots) check(r *run) bool {
	detail := fmt.Sprintf("%d of %d checkpoints match", c.matched, len(c.cps))
	if len(c.mismatches) > 0 || c.next != len(c.cps) {
		for _, m := range c.mismatches {
			detail += "; " + m
		}
		r.add(Check{Name: CheckCheckpointRoots, Detail: detail})
		return false
	}
	r.add(Check{Name: CheckCheckpointRoots, OK: true, Detail: detail})
	return true
}

// writeOut moves log.jsonl into place, writes the other files atomically, and
// export.json last.
func (r *run) writeOut(sum *Summary) error {
	sum.ExportedAt = signer.FormatTime(r.opts.Now())
	sum.Checks = r.res.Checks
	names := []string{"log.jsonl", "head.json", "keys.json", "checkpoints.json", "usage.json", "audit.json"}
	for _, name := range names {
		dst := filepath.Join(r.opts.Out, name)
		var fsum FileSum
		var err error
		if name == "log.jsonl" {
			src := filepath.Join(r.tmp, name)
			if fsum, err = hashFile(src); err != nil {
				return err
			}
			if err := os.Rename(src, dst); err != nil {
				return err
			}
		} else {
			data := r.files[name]
			if err := receipt.WriteFileAtomic(dst, data, 0o644); err != nil {
				return err
			}
			h := sha256.Sum256(data)
			fsum = FileSum{Bytes: int64(len(data)), SHA256: hex.EncodeToString(h[:])}
		}
		fsum.Name = name
		sum.Files = append(sum.Files, fsum)
	}
	data, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	return receipt.WriteFileAtomic(filepath.Join(r.opts.Out, "export.json"), append(data, '\n'), 0o644)
}

func hashFile(path string) (FileSum, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileSum{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return FileSum{}, err
	}
	return FileSum{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
