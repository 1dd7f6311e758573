package store

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/exporters"
)

// Status is what `svc exports status --db-env` shows of the database projections:
// the saved position, the backlog (messages on the stream past it) and the dead
// letters. The last error lives in the running process (Stats), not here.
func (s *Store) Status(ctx context.Context, js jetstream.JetStream) ([]exporters.ExporterStatus, error) {
	dead := map[string]uint64{}
	if st, err := js.Stream(ctx, exporters.DeadStream); err == nil {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(exporters.DeadPrefix+">"))
		if err != nil {
			return nil, err
		}
		for subj, n := range info.State.Subjects {
			name, _, _ := strings.Cut(strings.TrimPrefix(subj, exporters.DeadPrefix), ".")
			dead[name] += n
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	var out []exporters.ExporterStatus
	for _, p := range []projection{adminProjection, leavesProjection} {
		pos, err := s.Position(ctx, p.position)
		if err != nil {
			return nil, err
		}
		st := exporters.ExporterStatus{Exporter: p.name, Tenant: "*", Position: pos, DeadLetters: dead[p.name]}
		stream, err := js.Stream(ctx, p.stream)
		if err != nil {
			return nil, err
		}
		if c, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{p.subject},
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: pos + 1}); err == nil {
			if info, err := c.Info(ctx); err == nil {
				st.Backlog = info.NumPending
			}
		}
		out = append(out, st)
	}
	return out, nil
}
