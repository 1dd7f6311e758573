package store

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline/consume"
)

// Status is what `svc exports status --db-env` shows of the database projections:
// the saved position, the backlog (messages on the stream past it) and the dead
// letters. The last error lives in the running process (Stats), not here.
func (s *Store) Status(ctx context.Context, js jetstream.JetStream) ([]consume.Status, error) {
	bySubject, err := consume.DeadCounts(ctx, js)
	if err != nil {
		return nil, err
	}
	dead := map[string]uint64{}
	for subj, n := range bySubject {
		name, _, _ := strings.Cut(strings.TrimPrefix(subj, consume.DeadPrefix), ".")
		dead[name] += n
	}
	var out []consume.Status
	for _, p := range []projection{adminProjection, leavesProjection} {
		pos, err := s.Position(ctx, p.position)
		if err != nil {
			return nil, err
		}
		st := consume.Status{Exporter: p.name, Tenant: "*", Position: pos, DeadLetters: dead[p.name]}
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
