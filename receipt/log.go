package receipt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
)

// Proof is what a log answers for an appended leaf: its inclusion proof and a signed
// tree head at the proof's size.
type Proof struct {
	Inclusion Inclusion `json:"inclusion"`
	TreeHead  *Envelope `json:"treeHead"`
}

// Log is where the issuer appends leaves (the canonical JSON of an envelope).
//
// Contract: a nil error means the leaf is durably in the log at Proof.Inclusion.LeafIndex
// and the proof verifies against the head. Appending a leaf that is already in the log
// returns its existing index (never a second one). Any error means the caller must treat
// the leaf as not logged and hand out no receipt for it; errors from a log that answered
// with a refusal wrap ErrLogRefused, errors from a log that could not be reached wrap
// ErrLogUnavailable. Implementations are safe for concurrent use.
type Log interface {
	Append(ctx context.Context, leaf []byte) (*Proof, error)
}

// Sentinel errors of a Log.
var (
	ErrLogRefused     = errors.New("log refused the leaf")
	ErrLogUnavailable = errors.New("log unavailable")
)

// FileLog is a Log kept in a local SPEC.md log file, with heads signed by the issuer's
// own key.
type FileLog struct {
	mu    sync.Mutex
	file  *merkle.LogFile
	key   *signer.Key
	logID string
	now   func() time.Time
}

// NewFileLog wraps an open log file; heads are signed by key and name logID when set.
func NewFileLog(file *merkle.LogFile, key *signer.Key, logID string) *FileLog {
	return &FileLog{file: file, key: key, logID: logID, now: time.Now}
}

// OpenFileLog opens (or creates) the log file at path.
func OpenFileLog(path string, key *signer.Key, logID string) (*FileLog, error) {
	f, err := merkle.OpenLogFile(path, merkle.LogFileOptions{})
	if err != nil {
		return nil, err
	}
	return NewFileLog(f, key, logID), nil
}

// SetClock replaces the clock that dates signed heads (deterministic test vectors).
func (l *FileLog) SetClock(now func() time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = now
}

// File is the underlying log file.
func (l *FileLog) File() *merkle.LogFile { return l.file }

// Close closes the log file.
func (l *FileLog) Close() error { return l.file.Close() }

// Append adds leaf (or finds it) and answers with a proof against a freshly signed head.
func (l *FileLog) Append(ctx context.Context, leaf []byte) (*Proof, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLogUnavailable, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	h := merkle.LeafHash(leaf)
	if idx, ok := l.file.IndexOf(h); ok {
		return l.proveAt(idx, l.file.Size())
	}
	// The head of the tree with the leaf is signed while the line is written and
	// fsynced: the signature is not on the path of the fsync. It is handed out only
	// if the append lands where Next said.
	next, root, path := l.file.Tree().Next(h)
	appended := make(chan error, 1)
	var idx uint64
	go func() {
		var err error
		idx, err = l.file.AppendLeaf(string(leaf))
		appended <- err
	}()
	head, headErr := SignTreeHead(l.key, next+1, root.String(), l.now(), l.logID)
	if err := <-appended; err != nil {
		if errors.Is(err, merkle.ErrLineTooLong) || errors.Is(err, merkle.ErrInvalidLeaf) {
			return nil, fmt.Errorf("%w: %w", ErrLogRefused, err) // no retry can help
		}
		return nil, fmt.Errorf("%w: %w", ErrLogUnavailable, err)
	}
	if headErr != nil || idx != next { // the file was appended to behind this log's back
		return l.proveAt(idx, l.file.Size())
	}
	return &Proof{Inclusion: Inclusion{LeafIndex: idx, TreeSize: idx + 1, Hashes: HashStrings(path)}, TreeHead: head}, nil
}

// Prove answers for the leaf at idx with a proof against a freshly signed head at the
// log's current size.
func (l *FileLog) Prove(idx uint64) (*Proof, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	size := l.file.Size()
	if idx >= size {
		return nil, fmt.Errorf("leaf %d is beyond the log's size %d", idx, size)
	}
	return l.proveAt(idx, size)
}

func (l *FileLog) proveAt(idx, size uint64) (*Proof, error) {
	tree := l.file.Tree()
	hashes, err := tree.InclusionProof(idx, size)
	if err != nil {
		return nil, err
	}
	root, err := tree.RootAt(size)
	if err != nil {
		return nil, err
	}
	head, err := SignTreeHead(l.key, size, root.String(), l.now(), l.logID)
	if err != nil {
		return nil, err
	}
	return &Proof{Inclusion: Inclusion{LeafIndex: idx, TreeSize: size, Hashes: HashStrings(hashes)}, TreeHead: head}, nil
}

// HashStrings writes hashes as lowercase hex.
func HashStrings(hs []merkle.Hash) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.String()
	}
	return out
}

// ParseHashes reads hex hashes.
func ParseHashes(ss []string) ([]merkle.Hash, error) {
	out := make([]merkle.Hash, len(ss))
	for i, s := range ss {
		h, err := merkle.ParseHash(s)
		if err != nil {
			return nil, fmt.Errorf("hash %d: %w", i, err)
		}
		out[i] = h
	}
	return out, nil
}
