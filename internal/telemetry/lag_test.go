package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/exporters"
	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// TestLagGauges: the lag gauges read the broker. A projection that applied the first
// of two batches is behind by the time between them; requests waiting for a
// sequencer and receipts waiting for an exporter are counted by tenant (and
// exporter); a witness that cosigned an older checkpoint lags by the leaves between.
func TestLagGauges(t *testing.T) {
	ctx := context.Background()
	_, js := testkit.Broker(t)()
	tel, url := serveTelemetry(t)
	tel.WatchBroker(js)

	// Two batches on acme's leaves subject, 300 ms apart; the projection applied the first.
	a1, err := js.Publish(ctx, pipeline.LeavesSubject("acme"), []byte("batch 1"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := js.Publish(ctx, pipeline.LeavesSubject("acme"), []byte("batch 2")); err != nil {
		t.Fatal(err)
	}
	first, err := js.Stream(ctx, pipeline.LeavesStream)
	if err != nil {
		t.Fatal(err)
	}
	m1, err := first.GetMsg(ctx, a1.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	tel.Applied(telemetry.WithConsumer(ctx, "entries/acme"), js, pipeline.LeavesSubject("acme"), a1.Sequence, m1.Time)
	tel.Applied(telemetry.WithConsumer(ctx, "metering"), js, pipeline.LeavesPrefix+">", a1.Sequence+1, time.Now())

	// Three requests for acme's sequencer, whose consumer has not taken them.
	if _, err := js.CreateOrUpdateConsumer(ctx, pipeline.AppendStream, jetstream.ConsumerConfig{Durable: "seq-acme", FilterSubject: pipeline.AppendSubject("acme"), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, pipeline.AppendSubject("acme"), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// Two receipts for acme's otel exporter.
	if err := exporters.EnsureReceiptStream(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, exporters.ReceiptsStream, jetstream.ConsumerConfig{Durable: exporters.ConsumerName("otel", "acme"), FilterSubject: exporters.ReceiptsSubject("acme"), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := js.Publish(ctx, exporters.ReceiptsSubject("acme"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	tel.Checkpoint("acme", 100, time.Now(), func() uint64 { return 130 })
	tel.Witnessed("acme", "https://witness.example", 90, time.Now().Add(-2*time.Minute))

	// The broker counts a consumer's pending messages on its own time after the
	// publish is acknowledged, so the gauges are polled until they agree.
	testkit.Eventually(t, 10*time.Second, func() error {
		return checkLagGauges(t, url, float64(a1.Sequence))
	})
}

// checkLagGauges scrapes once and names every gauge that differs from the state
// TestLagGauges built.
func checkLagGauges(t *testing.T, url string, position float64) error {
	fams := scrape(t, url, "")
	var errs []error
	lag, err := value(fams, "svc_projection_lag_seconds", "consumer=entries/acme")
	if err != nil || lag < 0.25 || lag > 5 {
		errs = append(errs, fmt.Errorf("entries/acme lag %v s (%v), want the 0.3 s between its batch and the newest", lag, err))
	}
	if lag, err := value(fams, "svc_projection_lag_seconds", "consumer=metering"); err != nil || lag != 0 {
		errs = append(errs, fmt.Errorf("metering lag %v (%v), want 0: it applied the newest batch", lag, err))
	}
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"svc_projection_position", []string{"consumer=entries/acme"}, position},
		{"svc_sequencer_pending", []string{"tenant=acme"}, 3},
		{"svc_export_backlog", []string{"exporter=otel", "tenant=acme"}, 2},
		{"svc_checkpoint_lag", []string{"tenant=acme"}, 30},
		{"svc_witness_lag", []string{"tenant=acme", "witness=https://witness.example"}, 10},
	}
	for _, c := range checks {
		if got, err := value(fams, c.name, c.labels...); err != nil || got != c.want {
			errs = append(errs, fmt.Errorf("%s%v = %v (%v), want %v", c.name, c.labels, got, err, c.want))
		}
	}
	if age, err := value(fams, "svc_witness_age_seconds", "tenant=acme"); err != nil || age < 119 || age > 130 {
		errs = append(errs, fmt.Errorf("svc_witness_age_seconds = %v (%v), want about 120", age, err))
	}
	return errors.Join(errs...)
}
