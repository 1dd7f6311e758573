package telemetry_test

import (
	"context"
	"testing"
	"time"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// TestForgetTenant: once a tenant's sequencer moved to another process, this
// process's /metrics no longer carries the tenant's checkpoint and witness gauges, nor
// the lag of a replica tree that stopped following; other tenants keep theirs.
func TestForgetTenant(t *testing.T) {
	ctx := context.Background()
	_, js := testkit.Broker(t)()
	tel, url := serveTelemetry(t)
	for _, tenant := range []string{"acme", "beta"} {
		tel.Checkpoint(tenant, 10, time.Now(), func() uint64 { return 12 })
		tel.Witnessed(tenant, "https://witness.example", 10, time.Now())
		tel.Applied(ctx, js, pipeline.LeavesSubject(tenant), 1, time.Now())
	}
	series := []struct{ name, label string }{
		{"svc_checkpoint_age_seconds", "tenant="},
		{"svc_checkpoint_lag", "tenant="},
		{"svc_witness_lag", "tenant="},
		{"svc_witness_age_seconds", "tenant="},
		{"svc_projection_position", "consumer=svc.leaves."},
	}
	fams := scrape(t, url, "")
	for _, s := range series {
		if sample(fams, s.name, s.label+"acme") == nil {
			t.Fatalf("%s{%sacme} missing before the tenant moved", s.name, s.label)
		}
	}
	tel.ForgetTenant("acme")
	tel.ForgetProjection(pipeline.LeavesSubject("acme"))
	fams = scrape(t, url, "")
	for _, s := range series {
		if sample(fams, s.name, s.label+"acme") != nil {
			t.Errorf("%s{%sacme} still reported after the tenant moved away", s.name, s.label)
		}
		if sample(fams, s.name, s.label+"beta") == nil {
			t.Errorf("%s{%sbeta} gone, but beta did not move", s.name, s.label)
		}
	}
}
