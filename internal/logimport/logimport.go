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
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
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

// Check reads a whole log file and returns its leaf hashes, or an error naming the
// first malformed line; Import runs it first, so a bad file imports nothing.
func Check(path string) ([]merkle.Hash, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), merkle.MaxLineSize+1)
	var hashes []merkle.Hash
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		e, err := merkle.ParseLine(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, len(hashes)+1, err)
		}
		hashes = append(hashes, e.Hash)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: line %d: %w", path, len(hashes)+1, err)
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
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return 0, err
	}
	it, err := cons.Messages()
	if err != nil {
		return 0, err
	}
	defer it.Stop()
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
	var r io.Reader = f
	tree, err := merkle.NewTree(merkle.NewMemoryStore())
	if err != nil {
		return nil, err
	}
	prefix := nats.NewInbox() + "."
	answers := make(chan answer, Window)
	sub, err := nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		i, err := strconv.ParseUint(m.Subject[len(prefix):], 10, 64)
		if err != nil {
			return
		}
		a := answer{index: i}
		if m.Header.Get(pipeline.HeaderStatus) == pipeline.StatusOK {
			// Only the index and size are needed per answer; the head is decoded for
			// the last answer alone (a proof reply is ~2 KB of JSON).
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
			answers <- a
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
		answers <- a
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(-1, -1)

	var (
		sent, done uint64
		read       countingReader
		last       answer
		mu         sync.Mutex
	)
	read.r = r
	sc := bufio.NewScanner(&read)
	sc.Buffer(make([]byte, 0, 64<<10), merkle.MaxLineSize+1)
	lastReport := time.Now()
	wait := func() error {
		select {
		case a := <-answers:
			if a.err != nil {
				return fmt.Errorf("line %d: %w", a.index+1, a.err)
			}
			done++
			mu.Lock()
			if a.size >= last.size {
				last = a
			}
			mu.Unlock()
			return nil
		case <-time.After(Timeout):
			return fmt.Errorf("no answer from the log for %s: is a database-backed log server (svc log --db-env) running on this broker, and does it serve tenant %s?", Timeout, tenant)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		e, err := merkle.ParseLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", sent+1, err)
		}
		if _, err := tree.Append(e.Hash); err != nil {
			return nil, err
		}
		if sent < skip {
			sent++
			done++
			continue
		}
		l := pipeline.Leaf{Hash: e.Hash}
		if e.Kind == merkle.LineLeaf {
			l.Data = []byte(e.Leaf)
		}
		if err := nc.PublishMsg(pipeline.NewRequest(tenant, l, prefix+strconv.FormatUint(sent, 10))); err != nil {
			return nil, err
		}
		sent++
		for sent-done >= Window {
			if err := wait(); err != nil {
				return nil, err
			}
		}
		if progress != nil && time.Since(lastReport) >= time.Second {
			lastReport = time.Now()
			progress(done, read.n)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", sent+1, err)
	}
	for done < sent {
		if err := wait(); err != nil {
			return nil, err
		}
	}
	if progress != nil {
		progress(done, read.n)
	}
	if sent == 0 {
		return nil, errors.New("the file holds no leaves")
	}
	root, err := tree.RootAt(sent)
	if err != nil {
		return nil, err
	}
	if last.raw == nil {
		// Everything was in the log already, each leaf compared with the file's.
		return &Result{Leaves: sent, RootHash: root.String()}, nil
	}
	rep, err := pipeline.DecodeReply(last.raw)
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
