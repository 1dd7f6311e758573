package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
)

// Checkpointer publishes a tenant's signed heads: every Every it signs the head of a
// log that has grown, and every Heartbeat it re-signs the head of one that has not
// (only when the root at that size is unchanged, which it always is for a log that
// only appends).
type Checkpointer struct {
	Dir       string // the checkpoint directory; files go under Dir/<tenant>
	Tenant    string
	LogID     string
	Tree      *merkle.Tree // the tenant's tree (read only)
	Signer    receipt.EnvelopeSigner
	Every     time.Duration // default 300 s
	Heartbeat time.Duration // default 21600 s
	// First, when set, is how often Run looks whether a log without a checkpoint has
	// grown, so that its first checkpoint follows its first append within about First
	// instead of Every (svc log and svc up: 1 s); 0 waits for Every.
	First  time.Duration
	Logger *slog.Logger
	Now    func() time.Time
	// Telemetry receives each checkpoint's age and lag and each witness's
	// cosignature; nil: none.
	Telemetry *telemetry.Telemetry
	// Note, when set, also publishes each checkpoint as a C2SP signed note in
	// Dir/<tenant>/checkpoint, cosigned by each C2SP tlog-witness in Witnesses
	// (their cosignature lines are appended to the note).
	Note       NoteSigning
	Witnesses  []string // witness base URLs (POST <url>/add-checkpoint)
	HTTPClient *http.Client
	witnessed  map[string]uint64 // the size each witness last cosigned
	// DB, when set (the database store), is asked before signing whether a
	// checkpoint of this size exists with another root (then nothing is signed) and
	// records each checkpoint before its files are written.
	DB CheckpointDB

	mu   sync.RWMutex
	list []client.CheckpointFile // ascending treeSize, one per size (the latest signature)
}

// CheckpointDB is the database store of checkpoints (internal/store). CheckpointAt
// returns the checkpoint of a size, or nil; PutCheckpoint records one, replacing a
// checkpoint of the same size only when the root is the same, and fails otherwise;
// ThinCheckpoints deletes the tenant's rows ThinCheckpoints does not keep.
type CheckpointDB interface {
	CheckpointAt(ctx context.Context, tenant string, size uint64) (*client.CheckpointFile, error)
	PutCheckpoint(ctx context.Context, cp client.CheckpointFile) error
	ThinCheckpoints(ctx context.Context, tenant string) (int, error)
}

// CheckpointNoteDB is a CheckpointDB that also keeps each tenant's latest C2SP
// checkpoint note (cosignatures included), so that any process serves it.
type CheckpointNoteDB interface {
	PutCheckpointNote(ctx context.Context, tenant string, size uint64, note []byte) error
}

// NoteSigning signs a tenant's C2SP checkpoints: NoteSigner in process, the signer
// service's note signer (signer/remote) in database mode.
type NoteSigning interface {
	// SignCheckpoint returns the signed note of the checkpoint at size with root.
	SignCheckpoint(ctx context.Context, size uint64, root merkle.Hash) ([]byte, error)
	// VerifierKey is the note verifier key witnesses and clients are given.
	VerifierKey() string
}

// Load reads the checkpoints already published.
func (c *Checkpointer) Load() error {
	if c.Every <= 0 {
		c.Every = 300 * time.Second
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 21600 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	dir := filepath.Join(c.Dir, c.Tenant)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = nil
	for _, e := range entries {
		n, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		if _, err := strconv.ParseUint(n, 10, 64); err != nil {
			continue // latest.json and anything else
		}
		data, err := receipt.ReadFileCapped(filepath.Join(dir, e.Name()), 1<<20)
		if err != nil {
			return err
		}
		var cp client.CheckpointFile
		if err := json.Unmarshal(data, &cp); err != nil {
			return fmt.Errorf("checkpoint %s: %w", e.Name(), err)
		}
		c.list = append(c.list, cp)
	}
	sort.Slice(c.list, func(i, j int) bool { return c.list[i].TreeSize < c.list[j].TreeSize })
	if n := len(c.list); n > 0 {
		c.observe(c.list[n-1])
	}
	c.thinLocked()
	return nil
}

// thin applies ThinCheckpoints to the files, the list in memory and (with a database
// store) the rows. A file or row that cannot be deleted is logged and tried again at
// the next checkpoint.
func (c *Checkpointer) thin(ctx context.Context) {
	c.mu.Lock()
	c.thinLocked()
	c.mu.Unlock()
	if c.DB != nil {
		if n, err := c.DB.ThinCheckpoints(ctx, c.Tenant); err != nil {
			c.Logger.Warn("old checkpoints not thinned in the database", "tenant", c.Tenant, "err", err)
		} else if n > 0 {
			c.Logger.Debug("old checkpoints thinned in the database", "tenant", c.Tenant, "rows", n)
		}
	}
}

// thinLocked thins the list and the files; c.mu is held.
func (c *Checkpointer) thinLocked() {
	sizes := make([]uint64, len(c.list))
	for i, cp := range c.list {
		sizes[i] = cp.TreeSize
	}
	drop := ThinCheckpoints(sizes)
	if len(drop) == 0 {
		return
	}
	gone := make(map[uint64]bool, len(drop))
	for _, n := range drop {
		gone[n] = true
		err := os.Remove(filepath.Join(c.Dir, c.Tenant, strconv.FormatUint(n, 10)+".json"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.Logger.Warn("old checkpoint file not removed", "tenant", c.Tenant, "size", n, "err", err)
		}
	}
	c.list = slices.DeleteFunc(c.list, func(cp client.CheckpointFile) bool { return gone[cp.TreeSize] })
}

// Run publishes until ctx ends: with First set, the first checkpoint as soon as the log
// has grown (it looks every First until there is one), then every Every. A tick that
// ctx's end cut short is not logged: whoever stops Run publishes the last checkpoint
// (Tick) if it is to be.
func (c *Checkpointer) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		t.Reset(c.Step(ctx))
	}
}

// Step is one of Run's ticks: it publishes a checkpoint if one is due, logs a
// failure (not one ctx's end caused), and returns how long to wait until the next
// (First while none is published, else Every). A scheduler of many checkpointers
// calls it in place of Run.
func (c *Checkpointer) Step(ctx context.Context) time.Duration {
	err := c.Tick(ctx)
	if err != nil && ctx.Err() == nil {
		c.Logger.Warn("checkpoint not published", "tenant", c.Tenant, "err", err)
	}
	if err == nil && c.First > 0 && c.First < c.Every && c.none() {
		return c.First
	}
	return c.Every
}

// none says whether no checkpoint is published yet.
func (c *Checkpointer) none() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.list) == 0
}

// Tick publishes a checkpoint if the log grew, or if the heartbeat is due.
func (c *Checkpointer) Tick(ctx context.Context) error {
	size := c.Tree.Size()
	root, err := c.Tree.RootAt(size)
	if err != nil {
		return err
	}
	now := c.Now()
	if due, err := c.due(ctx, size, root, now); !due || err != nil {
		return err
	}
	env, th, err := receipt.SignHead(ctx, c.Signer, c.Tree, c.Tenant, c.LogID, now)
	if err != nil {
		return err
	}
	if th.TreeSize != size {
		// The tree grew meanwhile and the signer signed it as it now stands: check
		// that head as the one first read was checked.
		size = th.TreeSize
		if root, err = merkle.ParseHash(th.RootHash); err != nil {
			return err
		}
		if _, err := c.due(ctx, size, root, now); err != nil {
			return err
		}
	}
	// The file names the log the signed head names (the signer service's client
	// names every head's log: the tenant's default when LogID is empty).
	cp := client.CheckpointFile{Tenant: c.Tenant, LogID: th.Log, TreeSize: size, RootHash: root.String(), SignedAt: receipt.FormatTime(now), Envelope: env}
	if err := c.publish(ctx, cp, root); err != nil {
		return err
	}
	c.mu.Lock()
	if n := len(c.list); n > 0 && c.list[n-1].TreeSize == size {
		c.list[n-1] = cp
	} else {
		c.list = append(c.list, cp)
	}
	c.mu.Unlock()
	c.thin(ctx)
	c.observe(cp)
	c.Logger.Info("checkpoint published", "tenant", c.Tenant, "size", size, "root", root.String())
	return nil
}

// due says whether a checkpoint of the tree at size is to be signed now: the tree
// grew, or the heartbeat passed since the last one. A root that differs from one
// already signed at the same size (in this process's files or the database store) is
// an error, never a second signature.
func (c *Checkpointer) due(ctx context.Context, size uint64, root merkle.Hash, now time.Time) (bool, error) {
	c.mu.RLock()
	var last *client.CheckpointFile
	if n := len(c.list); n > 0 {
		last = &c.list[n-1]
	}
	c.mu.RUnlock()
	switch {
	case size == 0:
		return false, nil
	case last == nil || size > last.TreeSize:
	case size == last.TreeSize:
		if last.RootHash != root.String() {
			return false, fmt.Errorf("root at size %d is %s, but checkpoint says %s: refusing to re-sign", size, root, last.RootHash)
		}
		at, err := receipt.ParseTime(last.SignedAt)
		if err == nil && now.Sub(at) < c.Heartbeat {
			return false, nil
		}
	default:
		return false, fmt.Errorf("the tree (%d leaves) is smaller than the last checkpoint (%d)", size, last.TreeSize)
	}
	if c.DB != nil {
		// The database store may hold a checkpoint this process has no file of
		// (another front end, a restored directory): never sign a second root for it.
		prev, err := c.DB.CheckpointAt(ctx, c.Tenant, size)
		if err != nil {
			return false, fmt.Errorf("checkpoint store: %w", err)
		}
		if prev != nil && prev.RootHash != root.String() {
			return false, fmt.Errorf("root at size %d is %s, but the stored checkpoint says %s: refusing to sign", size, root, prev.RootHash)
		}
	}
	return true, nil
}

// publish stores cp in the database store (when there is one) and writes its files:
// <size>.json, latest.json and, with a note signer, the C2SP checkpoint with the
// witnesses' cosignatures.
func (c *Checkpointer) publish(ctx context.Context, cp client.CheckpointFile, root merkle.Hash) error {
	if c.DB != nil {
		if err := c.DB.PutCheckpoint(ctx, cp); err != nil {
			return fmt.Errorf("checkpoint store: %w", err)
		}
	}
	data, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(c.Dir, c.Tenant)
	if err := receipt.WriteFileAtomic(filepath.Join(dir, strconv.FormatUint(cp.TreeSize, 10)+".json"), data, 0o644); err != nil {
		return err
	}
	if err := receipt.WriteFileAtomic(filepath.Join(dir, "latest.json"), data, 0o644); err != nil {
		return err
	}
	if c.Note == nil {
		return nil
	}
	signed, err := c.Note.SignCheckpoint(ctx, cp.TreeSize, root)
	if err != nil {
		return fmt.Errorf("C2SP checkpoint: %w", err)
	}
	if c.witnessed == nil {
		c.witnessed = map[string]uint64{}
	}
	signed = c.cosign(ctx, cp.TreeSize, signed)
	if db, ok := c.DB.(CheckpointNoteDB); ok {
		// Every process of a hosted log serves it from there (GET /checkpoint).
		if err := db.PutCheckpointNote(ctx, c.Tenant, cp.TreeSize, signed); err != nil {
			return fmt.Errorf("checkpoint store: C2SP checkpoint: %w", err)
		}
	}
	return receipt.WriteFileAtomic(filepath.Join(dir, "checkpoint"), signed, 0o644)
}

// Since lists the checkpoints with treeSize > since, ascending.
func (c *Checkpointer) Since(since uint64) []client.CheckpointFile {
	c.mu.RLock()
	defer c.mu.RUnlock()
	i := sort.Search(len(c.list), func(i int) bool { return c.list[i].TreeSize > since })
	return append([]client.CheckpointFile(nil), c.list[i:]...)
}

// observe tells the telemetry about the latest checkpoint (svc.checkpoint.age, .lag).
func (c *Checkpointer) observe(cp client.CheckpointFile) {
	var size func() uint64
	if c.Tree != nil {
		size = c.Tree.Size
	}
	at, _ := receipt.ParseTime(cp.SignedAt)
	c.Telemetry.Checkpoint(c.Tenant, cp.TreeSize, at, size)
}
