package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// An append waiting for its answer when the connection to the broker drops is answered
// at once (unavailable, retry) instead of at the client's timeout: the answer it waits
// for is lost with the connection.
func TestDroppedConnectionFailsWaitingAppends(t *testing.T) {
	srv := testkit.ListeningBroker(t)
	nc, err := nats.Connect(natsembed.URL(srv, "pw-of-tests"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
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

// answerOK answers request m as a sequencer would, with status ok and body.
func answerOK(nc *nats.Conn, m *nats.Msg, body string) {
	r := nats.NewMsg(m.Header.Get(pipeline.HeaderReply))
	r.Header.Set(pipeline.HeaderStatus, pipeline.StatusOK)
	r.Data = []byte(body)
	_ = nc.PublishMsg(r)
}

// TestUnstoredRequestIsPublishedAgain: a request no stream stored (its node, or the
// stream's leader, was lost with it) is published again after ResendAfter instead of
// waiting out the timeout; the answer to the second publication ends the append.
func TestUnstoredRequestIsPublishedAgain(t *testing.T) {
	nc, _ := testkit.BareBroker(t)()
	// No SVC_APPEND stream: nobody acknowledges storing a request. A plain subscriber
	// sees every publication and answers only the second.
	var seen atomic.Int32
	sub, err := nc.Subscribe(pipeline.AppendSubject("acme"), func(m *nats.Msg) {
		if seen.Add(1) == 2 {
			answerOK(nc, m, `{"answered":2}`)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	c, err := pipeline.NewClient(nc, pipeline.ClientConfig{Timeout: 10 * time.Second, Retries: -1, ResendAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	start := time.Now()
	body, err := c.DoRaw(context.Background(), "acme", pipeline.NewLeaf([]byte(`{"a":1}`)))
	if err != nil || string(body) != `{"answered":2}` {
		t.Fatalf("got %s, %v; want the answer to the second publication", body, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("answered after %s: the request was not published again before its timeout", d)
	}
}

// TestUnstoredRequestGoesDirect: a request no stream stored (SVC_APPEND has no
// leader) is also sent on the tenant's direct subject, where its holder answers it;
// one copy per ResendAfter, though refusals are published again sooner.
func TestUnstoredRequestGoesDirect(t *testing.T) {
	nc, _ := testkit.BareBroker(t)()
	// No SVC_APPEND stream: every publication is refused at once ("no responders").
	var copies atomic.Int32
	sub, err := nc.Subscribe(pipeline.DirectSubject("acme"), func(m *nats.Msg) {
		if copies.Add(1) == 3 {
			answerOK(nc, m, `{"answered":"direct"}`)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	c, err := pipeline.NewClient(nc, pipeline.ClientConfig{Timeout: 10 * time.Second, Retries: -1, ResendAfter: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	start := time.Now()
	body, err := c.DoRaw(context.Background(), "acme", pipeline.NewLeaf([]byte(`{"a":1}`)))
	if err != nil || string(body) != `{"answered":"direct"}` {
		t.Fatalf("got %s, %v; want the answer to the third direct copy", body, err)
	}
	// The refusal resends after 100 ms; copies go at about 0.1, 0.4 and 0.7 s, not
	// with every resend (0.1, 0.2, 0.3 s).
	if d := time.Since(start); d < 550*time.Millisecond || d > 5*time.Second {
		t.Fatalf("the third direct copy answered after %s; want one copy per 300 ms", d)
	}
}

// TestStoredRequestIsNotPublishedAgain: a request SVC_APPEND acknowledged storing is
// not published again, nor sent direct, however long its answer takes.
func TestStoredRequestIsNotPublishedAgain(t *testing.T) {
	nc, js := testkit.Broker(t)()
	var copies atomic.Int32
	sub, err := nc.Subscribe(pipeline.DirectSubject("acme"), func(*nats.Msg) { copies.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	c, err := pipeline.NewClient(nc, pipeline.ClientConfig{Timeout: 1500 * time.Millisecond, Retries: -1, ResendAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// No sequencer: the request is stored and never answered.
	if _, err := c.DoRaw(context.Background(), "acme", pipeline.NewLeaf([]byte(`{"a":1}`))); !errors.Is(err, pipeline.ErrUnavailable) {
		t.Fatalf("got %v, want a timeout", err)
	}
	if n := testkit.StreamInfo(t, js, pipeline.AppendStream).State.Msgs; n != 1 {
		t.Fatalf("SVC_APPEND holds %d requests, want 1: a stored request was published again", n)
	}
	if n := copies.Load(); n != 0 {
		t.Fatalf("%d direct copies of a stored request", n)
	}
}

// TestAbandonedRequestIsNotPublishedAgain: once its caller gave up, a request nobody
// acknowledged storing is not published again, nor after Close.
func TestAbandonedRequestIsNotPublishedAgain(t *testing.T) {
	nc, _ := testkit.BareBroker(t)()
	var seen atomic.Int32 // no SVC_APPEND stream: nothing is stored, nothing answers
	sub, err := nc.Subscribe(pipeline.AppendSubject("acme"), func(*nats.Msg) { seen.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	c, err := pipeline.NewClient(nc, pipeline.ClientConfig{Timeout: 10 * time.Second, Retries: -1, ResendAfter: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 175*time.Millisecond)
	defer cancel()
	if _, err := c.DoRaw(ctx, "acme", pipeline.NewLeaf([]byte(`{"a":1}`))); err == nil {
		t.Fatal("answered; nothing should answer")
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	before := seen.Load()
	if before < 2 {
		t.Fatalf("%d publications while the caller waited; want it published again", before)
	}
	time.Sleep(500 * time.Millisecond) // ten resend periods: none may come
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := seen.Load(); n > before+1 { // one resend may have been on its way
		t.Fatalf("%d publications after the caller gave up", n-before)
	}
	c.Close()
}
