package logservice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"svc.dev/svc/httpjson"
	"svc.dev/svc/internal/logoflogs"
	"svc.dev/svc/internal/logserver"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/merkle"
	"svc.dev/svc/witness"
)

// The log of logs in the hosted log (docs/design/c2sp.md, "Many tenants, one witness
// budget"): one C2SP log whose leaves are the tenants' latest signed checkpoints,
// checkpointed and sent to the configured C2SP witnesses once per
// Hosted.LogOfLogsEvery by a single runner per deployment, elected with a lease
// (LogOfLogsLease) in the tenants' lease bucket. Its leaves are recorded in PostgreSQL
// (log_of_logs) before any witness sees a checkpoint over them, so the next runner
// replays them and the witnesses see one log that only grows; the primary key fences
// a runner that lost its lease. Every process serves it as a C2SP log under the
// prefix /log-of-logs/, with no credential:
//
//	GET /log-of-logs/checkpoint               the latest checkpoint, cosignatures included
//	GET /log-of-logs/tile/<L>/<N>[.p/<W>]     its hash tiles (C2SP tlog-tiles)
//	GET /log-of-logs/proof/<tenant>           the tenant's latest witnessed checkpoint's
//	                                          proof, in C2SP tlog-proof's text form
//
// each request within its client address's budget (LogOfLogsRate). A process keeps its
// copy of the tree in a file store under <data>/log-of-logs (its memory flat however
// many leaves, as a tenant's sequencer's tree), caught up from the database on demand.
// Its origin is svc-log/_log-of-logs, which no tenant's can be (ids start with
// [a-z0-9]; log ids may not start with svc-log/).

// LogOfLogsLease is the lease key of the log of logs' runner; no tenant id starts
// with an underscore.
const LogOfLogsLease = "_log-of-logs"

// LogOfLogsRate and LogOfLogsBurst bound, per client address, the requests to the
// /log-of-logs/ routes (a second, and at once): a checkpoint or proof is read from the
// database, and a tile past the process's copy catches it up.
const (
	LogOfLogsRate  = 20
	LogOfLogsBurst = 100
)

// lolCatchUpRows is how many leaves a catch-up reads from the database at a time.
const lolCatchUpRows = 4096

// lolState is a process's copy of the log of logs.
type lolState struct {
	mu     sync.Mutex
	store  merkle.HashStore // nil: not open
	tree   *merkle.Tree
	log    *logoflogs.Log
	closed bool // the service stopped: nothing opens the store again
}

// startLogOfLogs registers the routes and, when configured, runs the election and
// the intervals.
func (s *Service) startLogOfLogs(runCtx context.Context) {
	if s.hosted.cfg.LogOfLogsEvery <= 0 {
		return
	}
	l := &lolState{}
	limited := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if s.http.AllowAddr(w, r, "log-of-logs", LogOfLogsRate, LogOfLogsBurst) {
				h(w, r)
			}
		}
	}
	s.http.HandleFunc("GET /log-of-logs/checkpoint", limited(s.lolCheckpoint))
	s.http.HandleFunc("GET /log-of-logs/tile/{path...}", limited(func(w http.ResponseWriter, r *http.Request) { s.lolTile(w, r, l) }))
	s.http.HandleFunc("GET /log-of-logs/proof/{tenant}", limited(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.lolProof(r.Context(), l, r.PathValue("tenant"))
		if err != nil {
			httpjson.WriteError(w, http.StatusNotFound, err.Error())
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(p.Marshal())
	}))
	s.goRun("log of logs", func() error { defer l.close(); return s.runLogOfLogs(runCtx, l) })
}

// lolCheckpoint is GET /log-of-logs/checkpoint: the latest recorded checkpoint.
func (s *Service) lolCheckpoint(w http.ResponseWriter, r *http.Request) {
	_, note, err := s.hosted.cfg.Store.LogOfLogsCheckpoint(r.Context())
	switch {
	case err != nil:
		httpjson.WriteError(w, http.StatusServiceUnavailable, "the database does not answer: "+err.Error())
	case note == nil:
		httpjson.WriteError(w, http.StatusNotFound, "the log of logs has no checkpoint yet")
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(note)
	}
}

// lolTile is GET /log-of-logs/tile/<path>: a hash tile of the process's copy, caught
// up from the database first when the copy does not reach the tile yet.
func (s *Service) lolTile(w http.ResponseWriter, r *http.Request, l *lolState) {
	p, err := logserver.ParseTilePath(r.PathValue("path"))
	if err != nil {
		httpjson.WriteError(w, http.StatusNotFound, err.Error())
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if p.Entries {
		httpjson.WriteError(w, http.StatusNotFound, "the log of logs serves no entry bundles: a proof carries its leaf")
		return
	}
	reach := (p.Index<<merkle.TileHeight + uint64(p.Width)) << (merkle.TileHeight * p.Level)
	if l.tree == nil || l.tree.Size() < reach {
		if _, err := s.lolCatchUp(r.Context(), l); err != nil {
			httpjson.WriteError(w, http.StatusServiceUnavailable, "log of logs: "+err.Error())
			return
		}
	}
	if err := logserver.ServeHashTile(w, p, l.tree); err != nil {
		httpjson.WriteError(w, http.StatusServiceUnavailable, "log of logs: "+err.Error())
	}
}

// close closes l's store for good.
func (l *lolState) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reset()
	l.closed = true
}

// reset closes l's store: the next use opens it again and checks it against the
// database. The caller holds l.mu.
func (l *lolState) reset() {
	if l.store != nil {
		_ = l.store.Close()
	}
	l.store, l.tree, l.log = nil, nil, nil
}

// lolOpen opens l's copy (the file store under <data>/log-of-logs/tree) when it is not
// open: a store the database does not bear out (its last leaf is not the database's,
// or its root at the recorded checkpoint is not the checkpoint's: another database,
// or a lost one) is emptied and rebuilt. Each tenant's latest leaf the store holds is
// read back (Known), so the runner's Pending compares against it.
func (s *Service) lolOpen(ctx context.Context, l *lolState) error {
	if l.log != nil {
		return nil
	}
	if l.closed {
		return errors.New("the service is stopping")
	}
	dir := filepath.Join(s.cfg.DataDir, "log-of-logs", "tree")
	for attempt := 0; ; attempt++ {
		store, err := merkle.OpenFileStore(dir)
		if err != nil {
			return err
		}
		tree, err := merkle.NewTree(store)
		if err == nil {
			err = s.lolCheckStore(ctx, tree)
		}
		if err == nil {
			l.store, l.tree = store, tree
			break
		}
		_ = store.Close()
		if !errors.Is(err, errLolStore) || attempt > 0 {
			return err
		}
		s.cfg.Logger.Warn("log of logs: the tree store is not the database's; rebuilding it", "err", err)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := s.lolNewLog(ctx, l); err != nil {
		l.reset()
		return err
	}
	return nil
}

// errLolStore: the process's tree store disagrees with the database.
var errLolStore = errors.New("the log of logs' tree store disagrees with the database")

// lolCheckStore checks tree's last leaf against the database's, and its root at the
// recorded checkpoint's size against the checkpoint's.
func (s *Service) lolCheckStore(ctx context.Context, tree *merkle.Tree) error {
	db := s.hosted.cfg.Store
	size := tree.Size()
	if size == 0 {
		return nil
	}
	rows, err := db.LogOfLogsSince(ctx, size-1, 1)
	if err != nil {
		return err
	}
	last, err := tree.LeafHash(size - 1)
	if err != nil {
		return err
	}
	if len(rows) == 0 || merkle.LeafHash(rows[0].Note) != last {
		return fmt.Errorf("%w: leaf %d", errLolStore, size-1)
	}
	cpSize, note, err := db.LogOfLogsCheckpoint(ctx)
	if err != nil || note == nil || cpSize > size || cpSize == 0 {
		return err
	}
	text, _, _ := bytes.Cut(note, []byte("\n\n"))
	_, root, err := witness.ParseCheckpointBody(string(text) + "\n")
	if err != nil {
		return fmt.Errorf("the log of logs' recorded checkpoint: %w", err)
	}
	if have, err := tree.RootAt(cpSize); err != nil || have != root {
		return fmt.Errorf("%w: root at %d (%v)", errLolStore, cpSize, err)
	}
	return nil
}

// lolNewLog makes l's Log over its open tree, each tenant's latest leaf below the
// tree's size known.
func (s *Service) lolNewLog(ctx context.Context, l *lolState) error {
	ns, err := s.noteSigning("", LogOfLogsLease, l.tree)
	if err != nil {
		return err
	}
	if ns == nil {
		return errors.New("the log's signer signs no C2SP notes")
	}
	log := logoflogs.NewOn(l.tree, ns, s.cfg.Witnesses, nil)
	latest, err := s.hosted.cfg.Store.LogOfLogsLatest(ctx, l.tree.Size())
	if err != nil {
		return err
	}
	for _, e := range latest {
		log.Known(e.Tenant, e.Index, e.Note)
	}
	l.log = log
	return nil
}

// lolCatchUp brings l's copy up to the database, lolCatchUpRows leaves at a time, and
// adopts the latest recorded checkpoint (a runner taking over then sends the
// witnesses a proof from it at once). It returns that checkpoint's size. The caller
// holds l.mu.
func (s *Service) lolCatchUp(ctx context.Context, l *lolState) (uint64, error) {
	db := s.hosted.cfg.Store
	if err := s.lolOpen(ctx, l); err != nil {
		return 0, err
	}
	size, note, err := db.LogOfLogsCheckpoint(ctx)
	if err != nil {
		return 0, err
	}
	for {
		from := l.log.Size()
		rows, err := db.LogOfLogsSince(ctx, from, lolCatchUpRows)
		if err != nil {
			return 0, err
		}
		entries := make([]logoflogs.Entry, len(rows))
		for i, r := range rows {
			entries[i] = logoflogs.Entry{Tenant: r.Tenant, Checkpoint: r.Note}
		}
		if err := l.log.Restore(from, entries); err != nil {
			return 0, err
		}
		if len(rows) < lolCatchUpRows {
			break
		}
	}
	if note == nil {
		return 0, nil
	}
	return size, l.log.SetCheckpoint(size, note)
}

// lolProof proves tenant's latest checkpoint in the log of logs' latest witnessed
// checkpoint (its latest leaf below that checkpoint's size).
func (s *Service) lolProof(ctx context.Context, l *lolState, tenant string) (*logoflogs.Proof, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	size, err := s.lolCatchUp(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("log of logs: %w", err)
	}
	leaf, ok, err := s.hosted.cfg.Store.LogOfLogsLatestOf(ctx, tenant, size)
	if err != nil {
		return nil, fmt.Errorf("log of logs: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("tenant %q has no checkpoint in a witnessed checkpoint of the log of logs yet", tenant)
	}
	return l.log.ProofAt(leaf.Index, leaf.Note)
}

// runLogOfLogs holds the runner's lease when it can and runs an interval every
// LogOfLogsEvery while it does. The lease is renewed at least every LeaseTTL/3.
func (s *Service) runLogOfLogs(ctx context.Context, l *lolState) error {
	st := s.hosted
	tick := min(st.cfg.LogOfLogsEvery, st.cfg.LeaseTTL/3)
	var rev uint64
	var last time.Time
	for {
		var held bool
		rev, held = st.lolLease(ctx, rev)
		if held && time.Since(last) >= st.cfg.LogOfLogsEvery {
			last = time.Now()
			if err := s.lolInterval(ctx, l); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("log of logs: interval failed; the next one retries", "err", err)
				l.mu.Lock()
				l.reset() // start again from the database
				l.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(tick):
		}
	}
}

// lolLease takes or renews the runner's lease; rev is the revision this process last
// wrote (0: none). It returns the new revision and whether the lease is this process's.
func (st *hostedState) lolLease(ctx context.Context, rev uint64) (uint64, bool) {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if rev != 0 {
		if r, err := st.kv.Update(lctx, LogOfLogsLease, []byte(st.id), rev); err == nil {
			return r, true
		}
	}
	// Create succeeds when the key is absent or its lease ran out (the bucket's TTL).
	if r, err := st.kv.Create(lctx, LogOfLogsLease, []byte(st.id)); err == nil {
		return r, true
	}
	return 0, false
}

// lolInterval appends the tenants whose checkpoint changed, records them, then signs
// and sends the checkpoint to the witnesses and records it: nothing when no tenant
// changed and every recorded leaf is under the recorded checkpoint (no witness
// request). Leaves a runner recorded but did not checkpoint (it died between the two)
// are checkpointed by its successor's first interval, changes or not.
func (s *Service) lolInterval(ctx context.Context, l *lolState) error {
	db := s.hosted.cfg.Store
	l.mu.Lock()
	defer l.mu.Unlock()
	published, err := s.lolCatchUp(ctx, l)
	if err != nil {
		return err
	}
	notes, err := db.AllCheckpointNotes(ctx)
	if err != nil {
		return err
	}
	pending := l.log.Pending(notes)
	if len(pending) == 0 && l.log.Size() == published {
		return nil
	}
	if len(pending) > 0 {
		first := l.log.Size()
		rows := make([]store.LogOfLogsEntry, len(pending))
		for i, e := range pending {
			rows[i] = store.LogOfLogsEntry{Tenant: e.Tenant, Note: e.Checkpoint}
		}
		if err := db.AppendLogOfLogs(ctx, first, rows); err != nil {
			return err
		}
		if err := l.log.Restore(first, pending); err != nil {
			return err
		}
	}
	signed, failed, err := l.log.Checkpoint(ctx)
	if err != nil {
		return err
	}
	for w, err := range failed {
		s.cfg.Logger.Warn("log of logs: a witness did not cosign", "witness", w, "err", err)
	}
	return db.PutLogOfLogsCheckpoint(ctx, l.log.Size(), signed)
}
