package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/pipeline"
)

// An append waiting for its answer when the connection to the broker drops is answered
// at once (unavailable, retry) instead of at the client's timeout: the answer it waits
// for is lost with the connection.
func TestDroppedConnectionFailsWaitingAppends(t *testing.T) {
	srv, err := natsembed.Start(natsembed.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := pipeline.NewClient(nc, pipeline.ClientConfig{Timeout: time.Minute, Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// No sequencer answers, so the append waits until the connection drops.
	done := make(chan error, 1)
	go func() {
		_, err := c.DoRaw(context.Background(), "acme", pipeline.NewLeaf([]byte(`{"a":1}`)))
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("answered before the connection dropped: %v", err)
	default:
	}
	srv.Shutdown()
	select {
	case err := <-done:
		if !errors.Is(err, pipeline.ErrUnavailable) {
			t.Fatalf("got %v, want an unavailable refusal", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the append still waits 20 s after the connection dropped (its timeout is a minute)")
	}
}
