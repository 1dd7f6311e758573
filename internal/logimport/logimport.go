// Package logimport streams an existing SPEC.md log file (leaf, {hash} and {pruned}
// lines) into a tenant of the hosted log through its sequencer, in file order, and
// checks that the imported log's root equals the file's (`svc log-admin import`).
//
// Leaves go as append requests on svc.append.<tenant>, published in order on one
// connection with up to Window requests in flight; the tenant's single sequencer
// takes them in that order, so leaf i of the file gets index i (a leaf already in
// the log, as after an interrupted import, is answered with its existing index). Every
// answer's index is checked; another producer appending to the tenant meanwhile, or a
// file that repeats a leaf, stops the import with an error naming the line.
package logimport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// Window is how many append requests are in flight at most.
const Window = 4096

// Timeout is how long the import waits for any answer before giving up.
const Timeout = 30 * time.Second

// ErrMismatch: the imported log does not hold the file's leaves at the file's indices,
// or its root differs from the file's.
var ErrMismatch = errors.New("imported log does not match the file")

// Result is what an import did.
type Result struct {
	Leaves   uint64 // lines of the file, all in the log at their indices
	RootHash string // the file's root, equal to the log's at that size
	Head     *receipt.Envelope
}

// Progress is called about every second and at the end with leaves answered and bytes read.
type Progress func(leaves, bytes uint64)

type answer struct {
	index uint64
	raw   *nats.Msg // an answer with a proof; decoded only for the last one
	size  uint64
	err   error
}

// uintAfter reads the unsigned integer that follows the first key in data.
func uintAfter(data []byte, key string) (uint64, bool) {
	i := bytes.Index(data, []byte(key))
	if i < 0 {
		return 0, false
	}
	j := i + len(key)
	k := j
	for k < len(data) && data[k] >= '0' && data[k] <= '9' {
		k++
	}
	n, err := strconv.ParseUint(string(data[j:k]), 10, 64)
	return n, err == nil
}

// Check reads a whole log file as every reader of one does (merkle.ScanLogPath) and
// returns its leaf hashes, or an error naming the first malformed line; Import runs it
// first, so a bad file imports nothing.
func Check(path string) ([]merkle.Hash, error) {
	var hashes []merkle.Hash
	err := merkle.ScanLogPath(path, path, func(e merkle.Entry) error {
		hashes = append(hashes, e.Hash)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(hashes) == 0 {
		return nil, fmt.Errorf("%s holds no leaves", path)
	}
	return hashes, nil
}

// inLog compares the leaves tenant's log already holds with the file's first ones and
// returns how many it holds: an import resumes after them.
func inLog(ctx context.Context, nc *nats.Conn, tenant string, file []merkle.Hash) (uint64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	stream, last, err := pipeline.TenantLeaves(ctx, js, tenant)
	if err != nil || last == nil {
		return 0, err
	}
	subject := pipeline.LeavesSubject(tenant)
	first, _ := strconv.ParseUint(last.Header.Get(pipeline.HeaderFirst), 10, 64)
	count, _ := strconv.ParseUint(last.Header.Get(pipeline.HeaderCount), 10, 64)
	size := first + count
	if size > uint64(len(file)) {
		return 0, fmt.Errorf("%w: tenant %s already holds %d leaves, more than the file's %d", ErrMismatch, tenant, size, len(file))
	}
	it, done, err := pipeline.ReadFrom(ctx, stream, subject, pipeline.From{})
	if err != nil {
		return 0, err
	}
	defer done()
	for next := uint64(0); next < size; {
		m, err := it.Next()
		if err != nil {
			return 0, err
		}
		b, err := pipeline.DecodeBatch(m.Data())
		if err != nil {
			return 0, err
		}
		for i, l := range b.Leaves {
			idx := b.First + uint64(i)
			if idx != next {
				continue
			}
			if file[idx] != l.Hash {
				return 0, fmt.Errorf("%w: line %d differs from leaf %d of tenant %s, which already holds %d leaves", ErrMismatch, idx+1, idx, tenant, size)
			}
			next++
		}
	}
	return size, nil
}

// Import checks the log file at path (Check), then streams it into tenant. The log
// must not already hold leaves other than the file's first ones.
func Import(ctx context.Context, nc *nats.Conn, tenant, path string, progress Progress) (*Result, error) {
	hashes, err := Check(path)
	if err != nil {
		return nil, err
	}
	skip, err := inLog(ctx, nc, tenant, hashes)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tree, err := merkle.NewTree(merkle.NewMemoryStore())
	if err != nil {
		return nil, err
	}
	im := &importer{ctx: ctx, nc: nc, tenant: tenant, prefix: nats.NewInbox() + ".", answers: make(chan answer, Window)}
	sub, err := nc.Subscribe(im.prefix+"*", im.take)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(-1, -1)
	if err := im.stream(f, tree, skip, progress); err != nil {
		return nil, err
	}
	return im.result(tree)
}

// An importer is one run of Import: append requests go out on the tenant's subject
// with a reply subject per line (prefix + line index), answers come back to take.
type importer struct {
	ctx        context.Context
	nc         *nats.Conn
	tenant     string
	prefix     string
	answers    chan answer
	sent, done uint64 // lines sent (or found in the log already), lines answered
	last       answer // the answer with the largest tree size
}

// take reads one answer. Only the index and size are needed per answer; the head is
// decoded for the last answer alone (a proof reply is ~2 KB of JSON).
func (im *importer) take(m *nats.Msg) {
	i, err := strconv.ParseUint(m.Subject[len(im.prefix):], 10, 64)
	if err != nil {
		return
	}
	a := answer{index: i}
	if m.Header.Get(pipeline.HeaderStatus) == pipeline.StatusOK {
		idx, okI := uintAfter(m.Data, `"leafIndex":`)
		size, okS := uintAfter(m.Data, `"treeSize":`)
		switch {
		case !okI || !okS:
			a.err = fmt.Errorf("malformed answer to line %d", i+1)
		case idx != i:
			a.err = fmt.Errorf("%w: line %d got index %d (another producer appended to the tenant meanwhile, or the file repeats a leaf)", ErrMismatch, i+1, idx)
		default:
			a.size, a.raw = size, m
		}
		im.answers <- a
		return
	}
	rep, err := pipeline.DecodeReply(m)
	switch {
	case err != nil:
		a.err = err
	case rep.Refusal != nil:
		a.err = rep.Refusal
	default:
		a.err = fmt.Errorf("answer to line %d without a proof", i+1)
	}
	im.answers <- a
}

// wait takes the next answer; an error answer, Timeout without one, or the context's
// end stops the import.
func (im *importer) wait() error {
	select {
	case a := <-im.answers:
		if a.err != nil {
			return fmt.Errorf("line %d: %w", a.index+1, a.err)
		}
		im.done++
		if a.size >= im.last.size {
			im.last = a
		}
		return nil
	case <-time.After(Timeout):
		return fmt.Errorf("no answer from the log for %s: is a database-backed log server (svc log --db-env) running on this broker, and does it serve tenant %s?", Timeout, im.tenant)
	case <-im.ctx.Done():
		return im.ctx.Err()
	}
}

// stream reads the file entry by entry into tree and sends every line after the first
// skip (already in the log) as an append request, with at most Window unanswered,
// then waits for every answer.
func (im *importer) stream(f io.Reader, tree *merkle.Tree, skip uint64, progress Progress) error {
	read := countingReader{r: f}
	lastReport := time.Now()
	err := merkle.ScanLogFile(&read, func(e merkle.Entry) error {
		if err := im.send(e, tree, skip); err != nil {
			return err
		}
		if progress != nil && time.Since(lastReport) >= time.Second {
			lastReport = time.Now()
			progress(im.done, read.n)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for im.done < im.sent {
		if err := im.wait(); err != nil {
			return err
		}
	}
	if progress != nil {
		progress(im.done, read.n)
	}
	if im.sent == 0 {
		return errors.New("the file holds no leaves")
	}
	return nil
}

// send adds one line's entry to tree and, past the first skip lines, publishes its
// append request, waiting for answers while Window are in flight.
func (im *importer) send(e merkle.Entry, tree *merkle.Tree, skip uint64) error {
	if _, err := tree.Append(e.Hash); err != nil {
		return err
	}
	if im.sent < skip {
		im.sent++
		im.done++
		return nil
	}
	l := pipeline.Leaf{Hash: e.Hash}
	if e.Kind == merkle.LineLeaf {
		l.Data = []byte(e.Leaf)
	}
	if err := im.nc.PublishMsg(pipeline.NewRequest(im.tenant, l, im.prefix+strconv.FormatUint(im.sent, 10))); err != nil {
		return err
	}
	im.sent++
	for im.sent-im.done >= Window {
		if err := im.wait(); err != nil {
			return err
		}
	}
	return nil
}

// result compares the log's head after the last answer with the file's root.
func (im *importer) result(tree *merkle.Tree) (*Result, error) {
	sent := im.sent
	root, err := tree.RootAt(sent)
	if err != nil {
		return nil, err
	}
	if im.last.raw == nil {
		// Everything was in the log already, each leaf compared with the file's.
		return &Result{Leaves: sent, RootHash: root.String()}, nil
	}
	rep, err := pipeline.DecodeReply(im.last.raw)
	if err != nil || rep.Proof == nil {
		return nil, fmt.Errorf("the last answer: %v", err)
	}
	head, err := receipt.DecodeTreeHead(rep.Proof.TreeHead)
	if err != nil {
		return nil, err
	}
	if head.TreeSize != sent {
		return nil, fmt.Errorf("%w: the log holds %d leaves, the file %d (another producer appended meanwhile?)", ErrMismatch, head.TreeSize, sent)
	}
	if head.RootHash != root.String() {
		return nil, fmt.Errorf("%w: the log's root at %d is %s, the file's %s", ErrMismatch, sent, head.RootHash, root)
	}
	return &Result{Leaves: sent, RootHash: root.String(), Head: rep.Proof.TreeHead}, nil
}

type countingReader struct {
	r io.Reader
	n uint64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += uint64(n)
	return n, err
}
