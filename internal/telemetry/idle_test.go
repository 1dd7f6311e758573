package telemetry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// TestIdleTenantsAggregated: with a thousand tenants whose checkpoints are an hour old
// and whose replica trees applied nothing lately, a scrape carries the active tenants
// under their names and the idle ones as one (idle) series per gauge, so its size does
// not follow the tenant count.
func TestIdleTenantsAggregated(t *testing.T) {
	ctx := context.Background()
	_, js := testkit.Broker(t)()
	tel, url := serveTelemetry(t)
	hourAgo := time.Now().Add(-time.Hour)
	for i := range 1000 {
		tenant := fmt.Sprintf("idle-%04d", i)
		tel.Checkpoint(tenant, 10, hourAgo, func() uint64 { return 10 })
		tel.Witnessed(tenant, "https://witness.example", 8, hourAgo)
	}
	tel.Checkpoint("acme", 10, time.Now(), func() uint64 { return 10 }) // signed just now
	tel.Checkpoint("beta", 10, hourAgo, func() uint64 { return 15 })    // leaves wait for a checkpoint
	tel.Witnessed("acme", "https://witness.example", 10, time.Now())
	fams := scrape(t, url, "")
	for _, name := range []string{"svc_checkpoint_age_seconds", "svc_checkpoint_lag", "svc_witness_age_seconds", "svc_witness_lag"} {
		if f := fams[name]; f == nil || len(f.GetMetric()) > 3 {
			t.Fatalf("%s: %d series for 1,002 tenants, want at most 3 (acme, beta, (idle))", name, len(f.GetMetric()))
		}
	}
	if v, err := value(fams, "svc_checkpoint_age_seconds", "tenant="+telemetry.Idle); err != nil || v < 3599 {
		t.Fatalf("idle tenants' checkpoint age %v (%v), want the oldest, an hour", v, err)
	}
	if v, err := value(fams, "svc_checkpoint_lag", "tenant=beta"); err != nil || v != 5 {
		t.Fatalf("beta, 5 leaves past its checkpoint: %v (%v)", v, err)
	}
	if v, err := value(fams, "svc_witness_lag", "tenant="+telemetry.Idle); err != nil || v != 2 {
		t.Fatalf("idle tenants' witness lag %v (%v), want 2", v, err)
	}
	if sample(fams, "svc_checkpoint_age_seconds", "tenant=acme") == nil {
		t.Fatal("the active tenant acme lost its own series")
	}

	// Replica trees: 200 idle, then one active.
	for i := range 200 {
		tel.Applied(ctx, js, pipeline.LeavesSubject(fmt.Sprintf("idle-%04d", i)), 0, time.Now())
	}
	defer telemetry.SetActiveWindow(50 * time.Millisecond)()
	time.Sleep(60 * time.Millisecond)
	tel.Applied(ctx, js, pipeline.LeavesSubject("acme"), 0, time.Now())
	fams = scrape(t, url, "")
	if f := fams["svc_projection_position"]; f == nil || len(f.GetMetric()) != 1 || sample(fams, "svc_projection_position", "consumer="+pipeline.LeavesSubject("acme")) == nil {
		t.Fatalf("svc_projection_position: want only the active acme, got %v", f)
	}
	if sample(fams, "svc_projection_lag_seconds", "consumer="+telemetry.Idle) == nil {
		t.Fatal("no (idle) projection lag series")
	}
}
