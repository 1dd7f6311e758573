package logservice

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"svc.dev/svc/internal/projections"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer/remote"
)

// A hosted tenant is a C2SP log as a file-mode one is (docs/design/log-service.md,
// "Every tenant a C2SP log"): its checkpointer also signs each checkpoint as a C2SP
// signed note, through the signer service when the log key lives there, and records
// it in the database, from which every process serves GET /t/<tenant>/checkpoint.

// noteSigning is the C2SP note signer of tenant's checkpoints (origin: its log id, else
// svc-log/<tenant>), or nil when the log's signer can sign no notes.
func (s *Service) noteSigning(logID, tenant string, tree *merkle.Tree) (projections.NoteSigning, error) {
	origin := projections.DefaultOrigin(logID, tenant)
	if s.cfg.NoteKey != nil {
		return projections.NewNoteSigner(origin, s.cfg.NoteKey)
	}
	switch sg := s.cfg.Signer.(type) {
	case receipt.KeySigner:
		return projections.NewNoteSigner(origin, sg.Key)
	case *remote.Client:
		return sg.NewNoteSigner(origin, tenant, tree)
	}
	return nil, nil
}

// withNotes makes cp publish C2SP checkpoints of tenant too (and the witnesses'
// cosignatures), writing the verifier key beside them.
func (s *Service) withNotes(cp *projections.Checkpointer, logID, tenant string, tree *merkle.Tree) error {
	ns, err := s.noteSigning(logID, tenant, tree)
	if err != nil || ns == nil {
		return err
	}
	cp.Note, cp.Witnesses = ns, s.cfg.Witnesses
	dir := filepath.Join(s.cfg.CheckpointDir, tenant)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path, want := filepath.Join(dir, "checkpoint.vkey"), []byte(ns.VerifierKey()+"\n")
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) {
		return nil // written at an earlier start: a restart's starts skip its two fsyncs
	}
	return receipt.WriteFileAtomic(path, want, 0o644)
}

// errNoNote: a tenant has no C2SP checkpoint yet (404, not 503).
var errNoNote = fmt.Errorf("no checkpoint published yet: %w", fs.ErrNotExist)

// hostedNote is GET /t/<tenant>/checkpoint of a hosted tenant: its latest C2SP
// checkpoint from the database.
func (s *Service) hostedNote(tenant string) func() ([]byte, error) {
	return func() ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n, err := s.hosted.cfg.Store.LatestCheckpointNote(ctx, tenant)
		if err == nil && n == nil {
			err = errNoNote
		}
		return n, err
	}
}
