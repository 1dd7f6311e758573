package faults

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// floor is the restart's floor on the same broker, in the same run: a plain nats.go
// client doing, for each of the n tenants, 16 at a time as the restart's appends,
// the least broker work a tenant's first append after a restart needs: one KV create
// in a memory bucket (the sequencer lease) and one publish to a file stream, fsynced
// (the commit of its batch to SVC_LEAVES: what makes an acknowledged leaf durable).
// A second pass adds the reads and writes the start makes today (the admin catch-up's
// and the recovery's message reads, the quota's two, the request's publish to a
// memory stream), as plain round trips: what batching across
// tenants could save. Both use buckets and streams of their own, deleted after.
func (r *tenantsRun) floor() string {
	nc, err := nats.Connect(r.natsURL)
	if err != nil {
		return fmt.Sprintf(" floor: %v;", err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Minute)
	defer cancel()
	var out string
	for _, full := range []bool{false, true} {
		took, err := floorPass(ctx, js, r.n, full)
		what := "KV create + fsynced publish"
		if full {
			what = "today's start path as plain round trips (4 message reads, KV create, memory publish, fsynced publish)"
		}
		if err != nil {
			out += fmt.Sprintf(" floor (%s): %v;", what, err)
			continue
		}
		progress("N=%d: floor, %d × (%s) at 16 clients: %s (%.0f/s)", r.n, r.n, what, took.Round(10*time.Millisecond), float64(r.n)/took.Seconds())
		out += fmt.Sprintf(" floor %d × (%s) at 16 clients: %s;", r.n, what, took.Round(10*time.Millisecond))
	}
	return out
}

// floorPass makes floor's streams, runs one pass and deletes them.
func floorPass(ctx context.Context, js jetstream.JetStream, n int, full bool) (time.Duration, error) {
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_floor", Storage: jetstream.MemoryStorage})
	if err != nil {
		return 0, err
	}
	defer func() { _ = js.DeleteKeyValue(context.Background(), "bench_floor") }()
	file, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH_FLOOR", Subjects: []string{"benchfloor.>"}, Storage: jetstream.FileStorage, AllowDirect: true})
	if err != nil {
		return 0, err
	}
	defer func() { _ = js.DeleteStream(context.Background(), "BENCH_FLOOR") }()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH_FLOOR_MEM", Subjects: []string{"benchfloormem.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		return 0, err
	}
	defer func() { _ = js.DeleteStream(context.Background(), "BENCH_FLOOR_MEM") }()
	var failed atomic.Value
	var next atomic.Int64
	t0 := time.Now()
	done := make(chan struct{})
	for range 16 {
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := floorOne(ctx, js, kv, file, tenantID(i), full); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	for range 16 {
		<-done
	}
	took := time.Since(t0)
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	return took, ctx.Err()
}

// floorOne is one tenant's broker work in floorPass.
func floorOne(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, file jetstream.Stream, id string, full bool) error {
	if full {
		// The admin catch-up's and the recovery's reads of a last message (none
		// found is an answer as costly).
		for range 2 {
			if _, err := file.GetLastMsgForSubject(ctx, "benchfloor."+id); err != nil && err != jetstream.ErrMsgNotFound {
				return err
			}
		}
	}
	if _, err := kv.Create(ctx, id, []byte("holder")); err != nil {
		return err
	}
	if full {
		if _, err := js.Publish(ctx, "benchfloormem."+id, []byte("request")); err != nil {
			return err
		}
		for range 2 { // the quota's count
			if _, err := file.GetLastMsgForSubject(ctx, "benchfloor."+id); err != nil && err != jetstream.ErrMsgNotFound {
				return err
			}
		}
	}
	_, err := js.Publish(ctx, "benchfloor."+id, make([]byte, 256))
	return err
}
