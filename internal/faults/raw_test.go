package faults

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/testkit"
)

// rawPublisher is the floor svc's recovery is compared with: a plain JetStream
// publisher (nats.go with its default options, the cluster's URLs) appending to an R3
// file stream of its own, retrying until acknowledged. The longest gap between its
// acknowledgements across a fault is the broker's own failover.
type rawPublisher struct {
	js     jetstream.JetStream
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	acks  []time.Time // when each publication was acknowledged
	sents []time.Time // when each acknowledged publication was first sent
}

// rawStream is the publisher's stream (the fault cases move its leader).
const rawStream = "RAW"

func startRawPublisher(t testing.TB, c *cluster) *rawPublisher {
	t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	testkit.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: rawStream, Subjects: []string{"raw"}, Replicas: 3,
			Storage: jetstream.FileStorage, MaxMsgs: 100000})
		return err
	})
	ctx, cancel := context.WithCancel(context.Background())
	p := &rawPublisher{js: js, cancel: cancel, done: make(chan struct{})}
	go p.run(ctx)
	t.Cleanup(p.stop)
	return p
}

func (p *rawPublisher) run(ctx context.Context) {
	defer close(p.done)
	data := make([]byte, 200) // about a leaf's size
	sent := time.Now()
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := p.js.Publish(pctx, "raw", data)
		cancel()
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		p.acks, p.sents = append(p.acks, time.Now()), append(p.sents, sent)
		p.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		sent = time.Now()
	}
}

func (p *rawPublisher) stop() {
	p.cancel()
	<-p.done
}

// gap waits (up to within) for the acknowledgement of a publication first sent after
// t0, then returns the longest gap between acknowledgements from t0 on (as
// load.waitRecovered does for svc). Waiting for any acknowledgement after t0 (as it
// did) ended at once on one for a publication sent before the fault and answered
// just after it: the election that followed was then left out (a 6 ms "gap" for a
// stream whose leader was killed, run 2 of
// docs/measurements/2026-12-08-cluster-crash-gap.md).
func (p *rawPublisher) gap(t0 time.Time, within time.Duration) time.Duration {
	deadline := time.Now().Add(within)
	for {
		p.mu.Lock()
		n := len(p.sents)
		last := time.Time{}
		if n > 0 {
			last = p.sents[n-1]
		}
		p.mu.Unlock()
		if last.After(t0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.mu.Lock()
	times := slices.Clone(p.acks)
	p.mu.Unlock()
	var worst time.Duration
	prev := t0
	for _, at := range times {
		if at.After(prev) {
			worst = max(worst, at.Sub(prev))
			prev = at
		}
	}
	if !prev.After(t0) { // never recovered within the wait
		return time.Since(t0)
	}
	return worst
}
