package logservice

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"svc.dev/svc/httpjson"
	"svc.dev/svc/internal/logoflogs"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/merkle"
)

// The log of logs in the hosted log (docs/design/c2sp.md, "Many tenants, one witness
// budget"): one C2SP log whose leaves are the tenants' latest signed checkpoints,
// checkpointed and sent to the configured C2SP witnesses once per
// Hosted.LogOfLogsEvery by a single runner per deployment, elected with a lease
// (LogOfLogsLease) in the tenants' lease bucket. Its leaves are recorded in PostgreSQL
// (log_of_logs) before any witness sees a checkpoint over them, so the next runner
// replays them and the witnesses see one log that only grows; the primary key fences
// a runner that lost its lease. Every process serves
//
//	GET /log-of-logs/checkpoint        the latest checkpoint, cosignatures included
//	GET /log-of-logs/proof/<tenant>    logoflogs.Proof of the tenant's latest checkpoint
//
// from the database, catching its copy of the tree up on demand. Its origin is
// svc-log/_log-of-logs, which no tenant's can be (ids start with [a-z0-9];
// log ids may not start with svc-log/).

// LogOfLogsLease is the lease key of the log of logs' runner; no tenant id starts
// with an underscore.
const LogOfLogsLease = "_log-of-logs"

// lolState is a process's copy of the log of logs.
type lolState struct {
	mu  sync.Mutex
	log *logoflogs.Log
}

// startLogOfLogs registers the routes and, when configured, runs the election and
// the intervals.
func (s *Service) startLogOfLogs(runCtx context.Context) {
	st := s.hosted
	if st.cfg.LogOfLogsEvery <= 0 {
		return
	}
	l := &lolState{}
	s.http.HandleFunc("GET /log-of-logs/checkpoint", func(w http.ResponseWriter, r *http.Request) {
		_, note, err := st.cfg.Store.LogOfLogsCheckpoint(r.Context())
		switch {
		case err != nil:
			httpjson.WriteError(w, http.StatusServiceUnavailable, "the database does not answer: "+err.Error())
		case note == nil:
			httpjson.WriteError(w, http.StatusNotFound, "the log of logs has no checkpoint yet")
		default:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write(note)
		}
	})
	s.http.HandleFunc("GET /log-of-logs/proof/{tenant}", func(w http.ResponseWriter, r *http.Request) {
		p, err := s.lolProof(r.Context(), l, r.PathValue("tenant"))
		if err != nil {
			httpjson.WriteError(w, http.StatusNotFound, err.Error())
			return
		}
		httpjson.WriteJSON(w, http.StatusOK, p)
	})
	s.goRun("log of logs", func() error { return s.runLogOfLogs(runCtx, l) })
}

// lolCatchUp brings l's copy up to the database (a fresh one when it has none), and
// adopts the latest recorded checkpoint (a runner taking over then sends the
// witnesses a proof from it at once).
func (s *Service) lolCatchUp(ctx context.Context, l *lolState) error {
	db := s.hosted.cfg.Store
	if l.log == nil {
		tree, err := merkle.NewTree(merkle.NewMemoryStore())
		if err != nil {
			return err
		}
		ns, err := s.noteSigning("", LogOfLogsLease, tree)
		if err != nil {
			return err
		}
		if ns == nil {
			return errors.New("the log's signer signs no C2SP notes")
		}
		l.log = logoflogs.NewOn(tree, ns, s.cfg.Witnesses, nil)
	}
	from := l.log.Size()
	rows, err := db.LogOfLogsSince(ctx, from)
	if err != nil {
		return err
	}
	entries := make([]logoflogs.Entry, len(rows))
	for i, r := range rows {
		entries[i] = logoflogs.Entry{Tenant: r.Tenant, Checkpoint: r.Note}
	}
	if err := l.log.Restore(from, entries); err != nil {
		return err
	}
	size, note, err := db.LogOfLogsCheckpoint(ctx)
	if err != nil || note == nil {
		return err
	}
	return l.log.SetCheckpoint(size, note)
}

// lolProof proves tenant's latest checkpoint in the latest witnessed checkpoint.
func (s *Service) lolProof(ctx context.Context, l *lolState, tenant string) (*logoflogs.Proof, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := s.lolCatchUp(ctx, l); err != nil {
		return nil, fmt.Errorf("log of logs: %w", err)
	}
	return l.log.Proof(tenant)
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
				l.log = nil // start again from the database
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
// changed (no witness request).
func (s *Service) lolInterval(ctx context.Context, l *lolState) error {
	db := s.hosted.cfg.Store
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := s.lolCatchUp(ctx, l); err != nil {
		return err
	}
	notes, err := db.AllCheckpointNotes(ctx)
	if err != nil {
		return err
	}
	pending := l.log.Pending(notes)
	if len(pending) == 0 {
		return nil
	}
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
	signed, failed, err := l.log.Checkpoint(ctx)
	if err != nil {
		return err
	}
	for w, err := range failed {
		s.cfg.Logger.Warn("log of logs: a witness did not cosign", "witness", w, "err", err)
	}
	return db.PutLogOfLogsCheckpoint(ctx, l.log.Size(), signed)
}
