package logservice

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/receipt"
)

// gateSigner signs as its key does, except the first signature asked for once armed:
// that one waits until release is closed or its context ends (a remote signer slow to
// answer, within its client's timeout). waiting is closed when it starts waiting.
type gateSigner struct {
	receipt.KeySigner
	armed   *atomic.Bool
	waiting chan struct{}
	release chan struct{}
}

func (g gateSigner) SignEnvelope(ctx context.Context, payloadType string, payload []byte) (*receipt.Envelope, error) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.waiting)
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.KeySigner.SignEnvelope(ctx, payloadType, payload)
}

// TestAppendDuringAStopIsAnsweredPromptly: a tenant stopped for quiet while the
// signer is slow (its last checkpoint's signature waits, here for longer than an
// append may) answers an append that comes during the stop, while that signature still
// waits: the stop holds the tenant's lock, and the append waited for it (the front
// still routed it to the stopping sequencer, then the start waited for the lock) as
// long as the signer took.
func TestAppendDuringAStopIsAnsweredPromptly(t *testing.T) {
	defer func(w time.Duration) { lastCheckpointWait = w }(lastCheckpointWait)
	lastCheckpointWait = time.Hour // the signer's own timeout, out of reach
	srv, dbURL, key := hostedParts(t)
	g := gateSigner{KeySigner: receipt.KeySigner{Key: key}, armed: new(atomic.Bool), waiting: make(chan struct{}), release: make(chan struct{})}
	defer close(g.release)
	a, url := frontEndWith(t, t.TempDir(), natsembed.URL(srv, "pw-of-tests"), dbURL, key, slog.New(slog.DiscardHandler),
		Hosted{LeaseTTL: 2 * time.Second, QuietPeriod: 500 * time.Millisecond}, 1, func(c *Config) { c.Signer = g })
	tok := addTenant(t, a, "x")
	if s, body := appendTo(t, url, "x", tok, "first"); s != 200 {
		t.Fatalf("first append: %d %s", s, body)
	}
	// The checkpointer's next tick is an hour away: the next signature is the last
	// checkpoint of the quiet stop.
	g.armed.Store(true)
	select {
	case <-g.waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the quiet tenant's stop signed no last checkpoint")
	}
	type answer struct {
		code int
		body []byte
	}
	got := make(chan answer, 1)
	go func() {
		code, body := appendTo(t, url, "x", tok, "second")
		got <- answer{code, body}
	}()
	var ans answer
	select {
	case ans = <-got:
	case <-time.After(time.Minute): // far past the front's 10 s: the append is stuck
		t.Fatal("no answer to an append while the tenant's stop waits on the signer")
	}
	var p receipt.Proof
	if ans.code != 200 || json.Unmarshal(ans.body, &p) != nil || p.Inclusion.LeafIndex != 1 {
		t.Fatalf("append during the stop: %d %s, want 200 at index 1", ans.code, ans.body)
	}
}
