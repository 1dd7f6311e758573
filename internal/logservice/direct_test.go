package logservice

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// TestDirectCopyIsAnswered: the holder answers a request sent on the tenant's direct
// subject (no stream holds it) with a proof, and the same request arriving later
// through SVC_APPEND (the stream stored it after all) gets the same index and is
// acknowledged, leaving the work queue empty.
func TestDirectCopyIsAnswered(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	a, url := frontEnd(t, natsembed.URL(srv, "pw-of-tests"), dbURL, key)
	tok := addTenant(t, a, "acme")
	if code, body := appendTo(t, url, "acme", tok, "first, through the front"); code != 200 {
		t.Fatalf("append: %d %s", code, body)
	}
	// The test's own connection, as another process's.
	nc, err := nats.Connect(natsembed.URL(srv, "pw-of-tests"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	inbox := nats.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	req := pipeline.NewRequest("acme", pipeline.NewLeaf([]byte("second, sent direct")), inbox)
	direct := &nats.Msg{Subject: pipeline.DirectSubject("acme"), Header: req.Header, Data: req.Data}
	if err := nc.PublishMsg(direct); err != nil {
		t.Fatal(err)
	}
	first := proofIndex(t, replies)
	if first != 1 {
		t.Fatalf("the direct copy got index %d, want 1", first)
	}
	jsc := testkit.JetStream(t, nc)
	if _, err := jsc.PublishMsg(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if again := proofIndex(t, replies); again != first {
		t.Fatalf("the stream's copy got index %d, the direct copy %d", again, first)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if n := testkit.StreamInfo(t, jsc, pipeline.AppendStream).State.Msgs; n != 0 {
			return fmt.Errorf("SVC_APPEND holds %d requests; the stream's copy was not acknowledged", n)
		}
		return nil
	})
}

// proofIndex waits for the next reply on sub and returns its proof's leaf index.
func proofIndex(t *testing.T, sub *nats.Subscription) uint64 {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	r, err := pipeline.DecodeReply(m)
	if err != nil || r.Proof == nil {
		t.Fatalf("answer %+v, %v; want a proof", r, err)
	}
	return r.Proof.Inclusion.LeafIndex
}

// TestDirectCopiesAreBounded: a flood of direct copies for a tenant whose sequencer
// takes nothing waits at most directBacklog deep; the stream's copies are not bounded
// here (the lane's MaxAckPending bounds them).
func TestDirectCopiesAreBounded(t *testing.T) {
	r := &route{ch: make(chan jetstream.Msg), stop: make(chan struct{})}
	defer close(r.stop)
	kept := 0
	for range 3 * directBacklog {
		if r.putUpTo(directMsg{&nats.Msg{Subject: pipeline.DirectSubject("acme")}}, directBacklog) {
			kept++
		}
	}
	r.mu.Lock()
	waiting := len(r.over)
	r.mu.Unlock()
	if waiting > directBacklog || kept > directBacklog+1 {
		t.Fatalf("%d direct copies wait (%d kept), want at most %d", waiting, kept, directBacklog)
	}
	for range 10 {
		r.put(directMsg{&nats.Msg{}})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.over) != waiting+10 {
		t.Fatalf("a stream copy was dropped: %d wait, want %d", len(r.over), waiting+10)
	}
}
