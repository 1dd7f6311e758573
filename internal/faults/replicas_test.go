package faults

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/exporters"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/pipeline/consume"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// TestStreamsKeepTheirReplicas: on a 3-node cluster the exporters' streams and status
// bucket are R3 when the sink is given 3 (the router re-created them with one copy),
// and a tool that ensures the streams without --replicas leaves them R3.
func TestStreamsKeepTheirReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := startCluster(t, 3)
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	// A collector that always fails, so the status bucket gets written.
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer col.Close()
	exps, err := exporters.Build(exporters.Config{OTel: &exporters.OTelConfig{URL: col.URL}}, nil, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	sink, err := exporters.NewStreamSink(ctx, nc, "acme", exps, exporters.StreamOptions{Stderr: io.Discard, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		sink.Close(cctx)
	}()
	if err := pipeline.EnsureStreams(ctx, js, pipeline.StreamConfig{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	// Tools started without --replicas (svc log-admin, svc replay, a second sink).
	if err := pipeline.EnsureStreams(ctx, js, pipeline.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := exporters.EnsureReceiptStream(ctx, js, 0); err != nil {
		t.Fatal(err)
	}
	sink.Export(ctx, newBundle(t))
	testkit.Eventually(t, 30*time.Second, func() error {
		_, err := js.Stream(ctx, "KV_"+exporters.StatusBucket)
		return err
	})
	for _, name := range []string{pipeline.AppendStream, pipeline.LeavesStream, pipeline.AdminStream, exporters.ReceiptsStream, consume.DeadStream, "KV_" + exporters.StatusBucket} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("stream %s: %d replicas, want 3", name, r)
		}
	}
}

// newBundle issues one receipt into a file log.
func newBundle(t testing.TB) *receipt.Bundle {
	t.Helper()
	key, err := signer.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	is := testkit.FileIssuer(t, receipt.IssuerConfig{Key: key, Kind: receipt.KindSDK, Framework: "test"})
	p, err := is.Begin(testkit.ClaimedCall("agent", "search", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := is.Finish(context.Background(), p, receipt.Execution{Status: receipt.StatusExecuted, Result: json.RawMessage(`"ok"`), Provenance: receipt.Claimed})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
