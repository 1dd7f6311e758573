package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/pipeline/consume"
)

// ErrPoison marks a stream message a projection cannot decode: it goes to SVC_DEAD
// and the projection moves past it. Every other failure (the database does not
// answer, a timeout) is transient and retried, forever.
var ErrPoison = errors.New("message cannot be decoded")

// Handler names: the dead letters' handler and the status names.
const (
	HandlerAdmin  = "projection-admin"
	HandlerLeaves = "projection-leaves"
)

// RouterConfig tunes the projection router; zero fields take the defaults.
type RouterConfig struct {
	Retries    int           // retries in hand before the group is handed again; default 3
	MinBackoff time.Duration // default 50ms
	MaxBackoff time.Duration // default 1s: a projection resumes within a second of its database
	Timeout    time.Duration // one attempt (one transaction); default 30s
	PerSecond  int           // groups a second per projection; 0: no limit
	Replicas   int           // of SVC_DEAD when a dead letter creates it; default 1
}

func (c RouterConfig) withDefaults() (RouterConfig, error) {
	if c.Retries < 0 || c.PerSecond < 0 || c.MinBackoff < 0 || c.MaxBackoff < 0 || c.Timeout < 0 {
		return c, fmt.Errorf("projection router: negative setting in %+v", c)
	}
	if c.Retries == 0 {
		c.Retries = 3
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = 50 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = time.Second
	}
	if c.MaxBackoff < c.MinBackoff {
		return c, fmt.Errorf("projection router: max backoff %v below min %v", c.MaxBackoff, c.MinBackoff)
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	return c, nil
}

func (c RouterConfig) backoff(attempt int) time.Duration {
	d := c.MinBackoff << min(attempt-1, 20)
	if d <= 0 || d > c.MaxBackoff {
		d = c.MaxBackoff
	}
	return d
}

// projection is one handler: what it reads and how it applies a group.
type projection struct {
	name, stream, subject, position string
	apply                           func(s *Store, ctx context.Context, group []jetstream.Msg, skip map[uint64]bool, through uint64) error
}

var (
	adminProjection  = projection{HandlerAdmin, pipeline.AdminStream, pipeline.AdminPrefix + ">", "admin", (*Store).applyAdminGroup}
	leavesProjection = projection{HandlerLeaves, pipeline.LeavesStream, pipeline.LeavesPrefix + ">", "leaves", (*Store).applyLeavesGroup}
)

// runRouter runs projections as handlers on one Watermill router until ctx ends.
// reached, when not nil, hears each projection's last committed stream sequence.
func (s *Store) runRouter(ctx context.Context, js jetstream.JetStream, cfg RouterConfig, ps []projection, reached func(p string, last uint64)) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	r, err := consume.NewRouter()
	if err != nil {
		return err
	}
	st := s.stats()
	for _, p := range ps {
		sub := &groupSubscriber{js: js, stream: p.stream, subject: p.subject, maxGroup: maxGroup, backoff: cfg.backoff,
			start: func(ctx context.Context) (uint64, error) { return s.Position(ctx, p.position) }}
		if reached != nil {
			sub.reached = func(last uint64) { reached(p.name, last) }
		}
		consume.Handle(r, p.name, p.subject, sub, s.projectionHandler(js, p), consume.Chain{
			PerSecond:   cfg.PerSecond,
			Measure:     measure(st, p.name),
			DeadLetters: deadLetterMiddleware(js, p.name, cfg.Replicas),
			// poison is not retried; a transient failure (the database does not answer, a
			// timeout), when the retries are spent, is nacked and the subscriber hands the
			// same group again after a backoff, forever: it never skips a message.
			Retry: consume.Retry{Retries: cfg.Retries, MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff,
				Permanent: ErrPoison, Failed: func(err error) { st.failed(p.name, err) }},
			Timeout: cfg.Timeout,
		})
	}
	err = r.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// projectionHandler applies one group in one transaction; messages the dead-letter
// middleware set aside are skipped, and the position moves to the group's end.
func (s *Store) projectionHandler(js jetstream.JetStream, p projection) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		group := groupOf(msg)
		if len(group) == 0 {
			return nil
		}
		through := seqOf(group[len(group)-1])
		if err := p.apply(s, msg.Context(), group, skipped(msg), through); err != nil {
			return err
		}
		if p.name == HandlerLeaves {
			if md, err := group[len(group)-1].Metadata(); err == nil {
				s.Telemetry.Applied(telemetry.WithConsumer(msg.Context(), "store.leaves"), js, p.subject, through, md.Timestamp)
			}
		}
		return nil
	}
}

// poisonError names the message of a group that cannot be decoded.
type poisonError struct {
	seq uint64
	err error
}

func (e *poisonError) Error() string {
	return fmt.Sprintf("stream seq %d: %v: %v", e.seq, ErrPoison, e.err)
}
func (e *poisonError) Unwrap() []error { return []error{ErrPoison, e.err} }

// applyLeavesGroup decodes SVC_LEAVES messages and applies them in one transaction.
func (s *Store) applyLeavesGroup(ctx context.Context, group []jetstream.Msg, skip map[uint64]bool, through uint64) error {
	evs := make([]projections.Event, 0, len(group))
	for _, m := range group {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		seq := md.Sequence.Stream
		if skip[seq] {
			continue
		}
		b, err := pipeline.DecodeBatch(m.Data())
		if err != nil {
			return &poisonError{seq, err}
		}
		evs = append(evs, projections.Event{Seq: seq, Tenant: strings.TrimPrefix(m.Subject(), pipeline.LeavesPrefix), Time: md.Timestamp,
			Batch: &pipeline.Batch{First: b.First, Leaves: make([]pipeline.Leaf, len(b.Leaves))}})
	}
	return s.applyLeaves(ctx, evs, through)
}

// applyAdminGroup decodes SVC_ADMIN messages and applies them in one transaction.
func (s *Store) applyAdminGroup(ctx context.Context, group []jetstream.Msg, skip map[uint64]bool, through uint64) error {
	evs := make([]adminEvent, 0, len(group))
	for _, m := range group {
		seq := seqOf(m)
		if skip[seq] {
			continue
		}
		e, err := decodeAdmin(m.Data())
		if err != nil {
			return &poisonError{seq, err}
		}
		e.seq = seq
		evs = append(evs, e)
	}
	return s.applyAdminEvents(ctx, evs, through)
}
