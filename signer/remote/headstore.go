package remote

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// SignedHead is the last tree head the signer signed for one log: what the next head
// for that log must extend.
type SignedHead struct {
	// Log is the state's key: the head's "log" (see StateKey).
	Log      string `json:"log"`
	TreeSize uint64 `json:"treeSize"`
	RootHash string `json:"rootHash"` // lowercase hex
}

// StateKey is the key under which the signer remembers a log's last head: the head's
// log id (signed into the head, so a log server cannot move a head to another slot).
// "tenant:<tenant>" keys a head without a log id: one signed before the signer
// required a log id (svc 0.6.1), or a --start-head checkpoint file naming its tenant;
// the tenant's default log id (receipt.DefaultLogID) carries on from it: its first
// head must extend that one.
func StateKey(logID, tenant string) string {
	if logID != "" {
		return logID
	}
	if tenant != "" {
		return "tenant:" + tenant
	}
	return ""
}

// headFile is a state file: the head and a checksum over it, so that a torn or
// altered file is told apart from a valid one.
type headFile struct {
	SignedHead
	Sum string `json:"sum"` // hex SHA-256 of sumInput
}

func sumInput(h SignedHead) []byte {
	return []byte(strconv.Quote(h.Log) + "\n" + strconv.FormatUint(h.TreeSize, 10) + "\n" + h.RootHash + "\n")
}

// HeadStore remembers, per log, the last head the signer signed, one file per log in
// a directory (the file's name is the hex SHA-256 of the state key). A head is on disk
// (written to a temporary file, fsynced, renamed over the old one, the directory
// fsynced) before the signature leaves the signer, so a kill -9 or a power cut never
// forgets a head that was answered. A file that does not parse or whose checksum does
// not match stops the signer at start: it is never reset, since forgetting a log's
// head is exactly what would let a fork or rollback be signed.
type HeadStore struct {
	dir   string
	mu    sync.Mutex
	heads map[string]SignedHead
	locks map[string]*sync.Mutex
}

// OpenHeadStore opens (creating, mode 0700) the state directory and reads every head
// in it. Any unreadable or corrupted file is an error naming it.
func OpenHeadStore(dir string) (*HeadStore, error) {
	if dir == "" {
		return nil, errors.New("signer: no state directory (where the last head signed for each log is kept)")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("signer: state directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("signer: state directory: %w", err)
	}
	s := &HeadStore{dir: dir, heads: map[string]SignedHead{}, locks: map[string]*sync.Mutex{}}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") {
			os.Remove(filepath.Join(dir, name)) // a write that never reached its rename
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		h, err := readHeadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if fileName(h.Log) != name {
			return nil, fmt.Errorf("signer: state file %s holds log %q, whose file is %s: the state directory was altered; restore it from a backup (never delete it: the signer would then sign any head for that log)", filepath.Join(dir, name), h.Log, fileName(h.Log))
		}
		s.heads[h.Log] = h
	}
	return s, nil
}

func fileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:]) + ".json"
}

func readHeadFile(path string) (SignedHead, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return SignedHead{}, fmt.Errorf("signer: state file: %w", err)
	}
	var f headFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err = dec.Decode(&f)
	if err == nil {
		want := sha256.Sum256(sumInput(f.SignedHead))
		if f.Sum != hex.EncodeToString(want[:]) {
			err = errors.New("its checksum does not match its content")
		}
	}
	if err == nil {
		if b, herr := hex.DecodeString(f.RootHash); herr != nil || len(b) != sha256.Size || hex.EncodeToString(b) != f.RootHash {
			err = fmt.Errorf("rootHash %q is not 64 lowercase hex characters", f.RootHash)
		}
	}
	if err != nil {
		return SignedHead{}, fmt.Errorf("signer: state file %s is corrupted (%w); refusing to start rather than forget the last head signed for a log: restore the file from a backup, or, if the log's last signed head is known, write it back (see svc signer --help)", path, err)
	}
	return f.SignedHead, nil
}

// Last is the last head signed for the log with this state key.
func (s *HeadStore) Last(key string) (SignedHead, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.heads[key]
	return h, ok
}

// Lock serializes the check and record of one log's heads; it returns the unlock.
func (s *HeadStore) Lock(key string) func() {
	s.mu.Lock()
	l, ok := s.locks[key]
	if !ok {
		l = &sync.Mutex{}
		s.locks[key] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Len is the number of logs the store remembers.
func (s *HeadStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.heads)
}

// Record makes h the last head of its log, durably: it returns only after the file
// and the directory entry are fsynced.
func (s *HeadStore) Record(h SignedHead) error {
	sum := sha256.Sum256(sumInput(h))
	data, err := json.Marshal(headFile{SignedHead: h, Sum: hex.EncodeToString(sum[:])})
	if err != nil {
		return err
	}
	if err := receipt.WriteFileAtomic(filepath.Join(s.dir, fileName(h.Log)), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("signer: recording the head of log %q: %w", h.Log, err)
	}
	s.mu.Lock()
	s.heads[h.Log] = h
	s.mu.Unlock()
	return nil
}

// ParseStartHead reads an operator-provided starting head: a tree head envelope, a
// head answer {treeHead: envelope}, or a checkpoint file {tenant, envelope, ...}. The
// envelope must verify against one of keys. It returns the head and the tenant the
// file names (a checkpoint's), which keys a head without a log id.
func ParseStartHead(data []byte, keys []signer.PublicKey) (*receipt.TreeHead, string, error) {
	var wrap struct {
		TreeHead *receipt.Envelope `json:"treeHead"`
		Envelope *receipt.Envelope `json:"envelope"`
		Tenant   string            `json:"tenant"`
	}
	if err := json.Unmarshal(data, &wrap); err != nil {
		return nil, "", fmt.Errorf("not JSON: %w", err)
	}
	env := wrap.TreeHead
	if env == nil {
		env = wrap.Envelope
	}
	if env == nil {
		e, err := receipt.ParseEnvelope(data)
		if err != nil {
			return nil, "", fmt.Errorf("neither a tree head envelope, a head answer nor a checkpoint file: %w", err)
		}
		env = e
	}
	if _, err := env.Verify(keys); err != nil {
		return nil, "", fmt.Errorf("the head does not verify against the signer's keys: %w", err)
	}
	th, err := receipt.DecodeTreeHead(env)
	if err != nil {
		return nil, "", err
	}
	return th, wrap.Tenant, nil
}
