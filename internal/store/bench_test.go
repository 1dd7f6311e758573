package store

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// BenchmarkApplyLeaves applies 1,000 committed batches of 20 tenants to real
// PostgreSQL, grouped as FollowLeaves groups them (one transaction per group) or one
// batch per transaction, as a handler that applied and acknowledged each message on
// its own would: the cost a per-message projection handler has to beat.
func BenchmarkApplyLeaves(b *testing.B) {
	const n = 1000
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, group := range []int{1, 100, maxGroup} {
		b.Run(fmt.Sprintf("group=%d", group), func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, pgtest.New(b))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var seq uint64
			first := map[string]uint64{}
			c0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				evs := make([]projections.Event, 0, n)
				for i := range n {
					seq++
					tenant := fmt.Sprintf("t%02d", i%20)
					evs = append(evs, projections.Event{Seq: seq, Tenant: tenant, Time: at,
						Batch: &pipeline.Batch{First: first[tenant], Leaves: make([]pipeline.Leaf, 4)}})
					first[tenant] += 4
				}
				for i := 0; i < n; i += group {
					if err := s.ApplyLeaves(ctx, evs[i:min(i+group, n)]); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "batches/s")
			b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N*n), "cpu-µs/batch")
		})
	}
}

// BenchmarkProjectionRouter applies 1,000 batches of 20 tenants a round, published
// to SVC_LEAVES of an embedded nats-server, until caught up: through the projection
// router (router: the subscriber's groups, the middleware, a transaction per group)
// and through the pull loop FollowLeaves was before it (pull-loop: projections.Follow,
// grouped where nothing is pending or at maxGroup), alternating in the same run.
// cpu-µs/batch is this process's CPU (consumer, client and the embedded broker; not
// PostgreSQL's).
func BenchmarkProjectionRouter(b *testing.B) {
	for _, way := range []string{"pull-loop", "router"} {
		b.Run(way, func(b *testing.B) {
			ctx := context.Background()
			_, js := testkit.Broker(b)()
			if err := pipeline.EnsureStreams(ctx, js, pipeline.StreamConfig{}); err != nil {
				b.Fatal(err)
			}
			s, err := Open(ctx, pgtest.New(b))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			follow := s.FollowLeaves
			if way == "pull-loop" {
				follow = s.pullLoop
			}
			benchFollow(b, js, follow)
		})
	}
}

func benchFollow(b *testing.B, js jetstream.JetStream, follow func(context.Context, jetstream.JetStream, func()) error) {
	const n = 1000
	first := map[string]uint64{}
	var cpu time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for i := range n {
			tenant := fmt.Sprintf("t%02d", i%20)
			batch := &pipeline.Batch{First: first[tenant], Leaves: make([]pipeline.Leaf, 4)}
			first[tenant] += 4
			if _, err := js.PublishAsync(pipeline.LeavesSubject(tenant), batch.Encode()); err != nil {
				b.Fatal(err)
			}
		}
		<-js.PublishAsyncComplete()
		c0 := cpuTime()
		b.StartTimer()
		ctx, cancel := context.WithCancel(context.Background())
		if err := follow(ctx, js, cancel); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.StopTimer()
		cpu += cpuTime() - c0
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "batches/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu-µs/batch")
}

// pullLoop is FollowLeaves as it was before the router, kept as the benchmark's
// baseline: projections.Follow, a transaction per group.
func (s *Store) pullLoop(ctx context.Context, js jetstream.JetStream, caughtUp func()) error {
	pos, err := s.Position(ctx, "leaves")
	if err != nil {
		return err
	}
	var group []projections.Event
	flush := func() error {
		err := s.ApplyLeaves(ctx, group)
		group = group[:0]
		return err
	}
	err = projections.Follow(ctx, nil, js, pipeline.LeavesPrefix+">", pos+1, func(ev projections.Event) error {
		ev.Batch = &pipeline.Batch{First: ev.Batch.First, Leaves: make([]pipeline.Leaf, len(ev.Batch.Leaves))}
		group = append(group, ev)
		if ev.Pending == 0 || len(group) >= maxGroup {
			return flush()
		}
		return nil
	}, func() {
		if flush() == nil {
			caughtUp()
		}
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// cpuTime is the CPU this process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
