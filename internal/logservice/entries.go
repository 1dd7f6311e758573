package logservice

import (
	"context"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/projections"
)

// startEntries runs the tenant's C2SP entry-bundle projection (<dir>/entries), which
// /tile/entries/... serves. It is closed with the service.
func (s *Service) startEntries(runCtx context.Context, js jetstream.JetStream, tenant, dir string) (*projections.Entries, error) {
	e := &projections.Entries{Dir: filepath.Join(dir, "entries"), Tenant: tenant, JS: js, Logger: s.cfg.Logger, Telemetry: s.cfg.Telemetry}
	if err := e.Open(); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, e.Close)
	s.goRun("entry bundles "+tenant, func() error { return e.Run(runCtx) })
	return e, nil
}
