package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/projections"
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
		})
	}
}
