package exporters_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/exporters"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline/consume"
)

// TestRouterDeadLettersStatusAndReplay: a collector that refuses one receipt for good
// gets it kept in SVC_DEAD (with the handler, the error and the attempts) while the
// rest flow; after a restart the status shows the position and the dead letter; a
// replay of a period re-sends exactly those receipts; a replay of the dead letters,
// once the collector takes them, delivers them and empties SVC_DEAD.
func TestRouterDeadLettersStatusAndReplay(t *testing.T) {
	nc := startBroker(t)
	js, _ := jetstream.New(nc)
	ctx := context.Background()

	c := newCollector(t)
	bs, ids := issueN(t, 20)
	bad := ids[3]
	c.mu.Lock()
	c.reject[bad] = true
	c.mu.Unlock()
	var stderr testkit.LockedBuffer
	opts := exporters.StreamOptions{Stderr: &stderr, Queue: fast}
	sink, err := exporters.NewStreamSink(ctx, nc, "acme", c.both(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		sink.Export(ctx, b)
	}
	good := append(append([]string{}, ids[:3]...), ids[4:]...)
	c.waitFor(t, good, []string{"otel", "splunk"}, 15*time.Second)
	var letters []consume.DeadLetter
	testkit.Eventually(t, 10*time.Second, func() error {
		letters, err = consume.ListDead(ctx, js, "")
		if err != nil || len(letters) != 2 {
			return fmt.Errorf("dead letters %v (%v), want 2", letters, err)
		}
		return nil
	})
	for _, l := range letters {
		if l.ReceiptID != bad || l.Tenant != "acme" || (l.Handler != "otel" && l.Handler != "splunk") || !strings.Contains(l.Error, "400") || l.Attempts < 1 || l.SourceSeq != "4" {
			t.Errorf("dead letter %+v", l)
		}
	}
	testkit.Eventually(t, 5*time.Second, func() error { // counted as each handler returns
		stats := sink.HandlerStats()
		if len(stats) != 2 {
			return fmt.Errorf("handler stats for %d exporters, want 2", len(stats))
		}
		for name, hs := range stats {
			if hs.Delivered != 19 || hs.Dead != 1 || hs.Busy <= 0 {
				return fmt.Errorf("%s handler: %+v, want 19 delivered and 1 dead letter", name, hs)
			}
		}
		return nil
	})
	if !strings.Contains(stderr.String(), "refused for good, kept in "+consume.DeadStream) {
		t.Errorf("no stderr line for the dead letter: %q", stderr.String())
	}
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The next process: nothing is redelivered, and the status says where each is.
	sink2, err := exporters.NewStreamSink(ctx, nc, "acme", c.both(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer sink2.Close(ctx)
	testkit.Eventually(t, 5*time.Second, func() error {
		st, err := exporters.Status(ctx, js, "acme", []string{"otel", "splunk"})
		if err != nil {
			return err
		}
		for _, s := range st {
			if s.Position != 20 || s.Backlog != 0 || s.DeadLetters != 1 || !strings.Contains(s.LastError, "400") {
				return fmt.Errorf("status %+v", s)
			}
		}
		return nil
	})

	// Replay from sequence 11: exactly receipts 11..20 are sent to otel again.
	otel := c.both(t)[0]
	res, err := exporters.Replay(ctx, js, "acme", otel, exporters.Since{Seq: 11}, fast, nil)
	if err != nil || res.Sent != 10 || len(res.Refused) != 0 {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	c.mu.Lock()
	for i, id := range ids {
		want := 1
		switch {
		case id == bad:
			want = 0
		case i >= 10:
			want = 2
		}
		if c.otlp[id] != want {
			t.Errorf("receipt %d: %d otel deliveries, want %d", i+1, c.otlp[id], want)
		}
	}
	c.reject = map[string]bool{}
	c.mu.Unlock()

	// The collector now takes it: replaying the dead letters delivers them and
	// empties SVC_DEAD.
	n, err := consume.ReplayDead(ctx, js, nil, nil, exporters.DeadHandlers(c.both(t))...)
	if err != nil || n != 2 {
		t.Fatalf("dead replay: %d, %v", n, err)
	}
	c.waitFor(t, []string{bad}, []string{"otel", "splunk"}, 5*time.Second)
	if letters, _ := consume.ListDead(ctx, js, ""); len(letters) != 0 {
		t.Errorf("%d dead letters left", len(letters))
	}
}
