// Package logoflogs is the "log of logs" (docs/design/c2sp.md): one C2SP log whose
// leaves are the tenants' signed checkpoints, checkpointed and sent to the C2SP
// witnesses once per interval, so that any number of tenants costs one add-checkpoint
// request per interval of the public witness network's budget; a tenant's checkpoint is
// proved witnessed by its inclusion in a cosigned checkpoint of the log of logs.
//
// Leaf i is the bytes of a tenant's signed checkpoint note as the tenant published it;
// a tenant whose checkpoint changed gets a new leaf (the log only grows), and Latest
// names the tenant's latest. The Log keeps its hashes in the tree's store (a file
// store in the hosted log: flat memory however many leaves) and, per tenant, only its
// latest leaf's index and hash; the leaves' bytes are the caller's (the hosted log's
// PostgreSQL table). A runner that persists the log records each interval's
// Pending entries before Checkpoint shows them to a witness, and its successor replays
// the records through Restore, so the witnesses see one log that only grows. This
// package is the mechanism; the hosted log runs it (internal/logservice/logoflogs.go).
package logoflogs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/internal/projections"
	"svc.dev/svc/merkle"
	"svc.dev/svc/witness"
)

// Log is a log of logs.
type Log struct {
	tree      *merkle.Tree
	signer    projections.NoteSigning
	witnesses []string
	client    *http.Client

	mu        sync.Mutex
	latest    map[string]uint64      // tenant → index of its latest leaf
	hashes    map[string]merkle.Hash // tenant → its latest leaf's hash (the leaves' bytes are not held)
	witnessed map[string]uint64      // witness → the size it cosigned
	note      []byte                 // the latest checkpoint, cosignatures included
	noteSize  uint64                 // its size
}

// New is an empty log of logs signed by signer (its origin is the log of logs') and
// cosigned by the C2SP witnesses at witnesses (base URLs).
func New(signer projections.NoteSigning, witnesses []string, client *http.Client) (*Log, error) {
	tree, err := merkle.NewTree(merkle.NewMemoryStore())
	if err != nil {
		return nil, err
	}
	return NewOn(tree, signer, witnesses, client), nil
}

// NewOn is New on tree, which must be empty and which the log then owns (a signer
// that proves consistency to a signing service reads it).
func NewOn(tree *merkle.Tree, signer projections.NoteSigning, witnesses []string, client *http.Client) *Log {
	if client == nil {
		client = http.DefaultClient
	}
	return &Log{tree: tree, signer: signer, witnesses: witnesses, client: client, latest: map[string]uint64{}, hashes: map[string]merkle.Hash{}, witnessed: map[string]uint64{}}
}

// Entry is one leaf of the log of logs: a tenant's signed checkpoint note.
type Entry struct {
	Tenant     string
	Checkpoint []byte
}

// Interval appends a leaf for each tenant whose checkpoint differs from its latest
// leaf (Pending), signs the log of logs' checkpoint and sends it to each witness
// (Checkpoint): one request a witness, however many tenants changed. It returns the
// cosigned checkpoint (nil when nothing changed) and the witnesses that did not
// cosign, with why. A runner that persists the log calls the three steps itself, so
// that the leaves are durable before any witness sees a checkpoint over them. One
// runner calls it at a time.
func (l *Log) Interval(ctx context.Context, checkpoints map[string][]byte) ([]byte, map[string]error, error) {
	pending := l.Pending(checkpoints)
	if len(pending) == 0 {
		return nil, nil, nil
	}
	if err := l.Restore(l.Size(), pending); err != nil {
		return nil, nil, err
	}
	return l.Checkpoint(ctx)
}

// Pending lists, by tenant name, the tenants of checkpoints whose checkpoint differs
// from their latest leaf: the leaves the next interval appends, in the order it does.
func (l *Log) Pending(checkpoints map[string][]byte) []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Entry
	for tenant, cp := range checkpoints {
		if held, ok := l.hashes[tenant]; ok && held == merkle.LeafHash(cp) {
			continue
		}
		out = append(out, Entry{Tenant: tenant, Checkpoint: cp})
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}

// Size is the number of leaves.
func (l *Log) Size() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tree.Size()
}

// Restore appends entries as leaves first, first+1, ...: entries below the size the
// log holds are skipped (a replay of persisted records may overlap), a first beyond
// it is an error (a persisted record is missing). A new runner replays the persisted
// records through it before its first interval, so the witnesses, which hold the size
// they cosigned, see a log that only grew.
func (l *Log) Restore(first uint64, entries []Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	size := l.tree.Size()
	if first > size {
		return fmt.Errorf("log of logs: entries start at leaf %d but the log holds %d leaves (a record is missing)", first, size)
	}
	if first+uint64(len(entries)) <= size {
		return nil
	}
	entries = entries[size-first:]
	hashes := make([]merkle.Hash, len(entries))
	for i, e := range entries {
		hashes[i] = merkle.LeafHash(e.Checkpoint)
	}
	if _, err := l.tree.AppendBatch(hashes); err != nil {
		return err
	}
	for i, e := range entries {
		l.latest[e.Tenant] = size + uint64(i)
		l.hashes[e.Tenant] = hashes[i]
	}
	return nil
}

// Known records leaf, leaf index of the tree, as tenant's latest unless a later one
// is known: a runner that reopens a tree its store already holds learns each tenant's
// latest leaf this way (Restore records those it appends), so that Pending compares
// against it. An index outside the tree is ignored.
func (l *Log) Known(tenant string, index uint64, leaf []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i, ok := l.latest[tenant]; (ok && i >= index) || index >= l.tree.Size() {
		return
	}
	l.latest[tenant], l.hashes[tenant] = index, merkle.LeafHash(leaf)
}

// Checkpoint signs the log of logs' checkpoint at its size and sends it to each
// witness. It returns the checkpoint with the cosignatures it got and the witnesses
// that did not cosign, with why.
func (l *Log) Checkpoint(ctx context.Context) ([]byte, map[string]error, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	size := l.tree.Size()
	root, err := l.tree.RootAt(size)
	if err != nil {
		return nil, nil, err
	}
	signed, err := l.signer.SignCheckpoint(ctx, size, root)
	if err != nil {
		return nil, nil, err
	}
	failed := map[string]error{}
	for _, w := range l.witnesses {
		lines, err := l.cosign(ctx, w, size, signed)
		if err != nil {
			failed[w] = err
			continue
		}
		signed = append(signed, lines...)
	}
	l.note, l.noteSize = signed, size
	return signed, failed, nil
}

// SetCheckpoint adopts signed, a checkpoint of size another runner published: a
// process that serves proofs without running the log, or a runner taking over, which
// then takes the witnesses to hold size (a witness that holds another answers 409 with
// it, and is sent a proof from that one).
func (l *Log) SetCheckpoint(size uint64, signed []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if held := l.tree.Size(); size > held {
		return fmt.Errorf("log of logs: a checkpoint of size %d but %d leaves held", size, held)
	}
	if size >= l.noteSize {
		l.note, l.noteSize = signed, size
	}
	for _, w := range l.witnesses {
		l.witnessed[w] = max(l.witnessed[w], size)
	}
	return nil
}

// cosign sends the checkpoint of size to witness w, with a proof from the size it
// holds (learned from a 409 when unknown).
func (l *Log) cosign(ctx context.Context, w string, size uint64, signed []byte) ([]byte, error) {
	old := l.witnessed[w]
	for range 2 {
		var proof []merkle.Hash
		if old > 0 && old < size {
			var err error
			if proof, err = l.tree.ConsistencyProof(old, size); err != nil {
				return nil, err
			}
		}
		lines, err := projections.AddCheckpoint(ctx, l.client, w, old, proof, signed)
		var conflict *projections.ErrWitnessConflict
		if errors.As(err, &conflict) && conflict.Size <= size {
			old = conflict.Size
			continue
		}
		if err == nil {
			l.witnessed[w] = size
		}
		return lines, err
	}
	return nil, fmt.Errorf("witness %s kept answering 409", w)
}

// Proof is what proves a tenant's checkpoint witnessed: the checkpoint (the leaf), its
// index, the inclusion proof into the log of logs' checkpoint, and that checkpoint
// with its cosignatures. Its text form is C2SP tlog-proof's (Marshal, ParseProof).
type Proof struct {
	Checkpoint []byte // the tenant's signed checkpoint note: the leaf, tlog-proof's extra data
	Index      uint64
	Inclusion  []merkle.Hash
	Witnessed  []byte // the log of logs' cosigned checkpoint
}

// Latest is the index of tenant's latest leaf; false when it has none.
func (l *Log) Latest(tenant string) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, ok := l.latest[tenant]
	return i, ok
}

// ProofAt proves leaf, the bytes of leaf index, included in the latest witnessed
// checkpoint of the log of logs. Leaf must hash to the tree's leaf index (the bytes
// come from the caller's record of the leaves).
func (l *Log) ProofAt(index uint64, leaf []byte) (*Proof, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.note == nil {
		return nil, errors.New("the log of logs has no witnessed checkpoint yet")
	}
	size := l.noteSize
	if index >= size {
		return nil, fmt.Errorf("leaf %d is not in a witnessed checkpoint of the log of logs yet (size %d); retry after the next interval", index, size)
	}
	if h, err := l.tree.LeafHash(index); err != nil {
		return nil, err
	} else if h != merkle.LeafHash(leaf) {
		return nil, fmt.Errorf("log of logs: the recorded leaf %d does not hash to the tree's", index)
	}
	inc, err := l.tree.InclusionProof(index, size)
	if err != nil {
		return nil, err
	}
	return &Proof{Checkpoint: leaf, Index: index, Inclusion: inc, Witnessed: l.note}, nil
}

// Verify checks p: the log of logs' checkpoint under policy (signed by a log of the
// policy, cosigned by its quorum), the tenant's checkpoint included in it, and signed
// by the tenant's log key tenantLog. It returns the tenant's checkpoint size and root,
// which the tenant's own proofs (inclusion of a receipt's leaf, consistency) reach.
func Verify(p *Proof, policy *witness.Policy, tenantLog note.Verifier) (uint64, merkle.Hash, error) {
	c, err := policy.VerifyCheckpoint(p.Witnessed, nil)
	if err != nil {
		return 0, merkle.Hash{}, fmt.Errorf("log of logs: %w", err)
	}
	if err := merkle.VerifyInclusion(p.Index, c.Size, merkle.LeafHash(p.Checkpoint), p.Inclusion, c.Root); err != nil {
		return 0, merkle.Hash{}, fmt.Errorf("the tenant's checkpoint is not in the log of logs at %d: %w", p.Index, err)
	}
	n, err := note.Open(p.Checkpoint, note.VerifierList(tenantLog))
	if err != nil {
		return 0, merkle.Hash{}, fmt.Errorf("the tenant's checkpoint: %w", err)
	}
	return witness.ParseCheckpointBody(n.Text)
}
