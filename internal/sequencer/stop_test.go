package sequencer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// blockingAdmit holds every batch until the sequencer's context ends, then fails as
// tenancy.Quota does when its count of the month is cut short.
type blockingAdmit struct{ entered chan struct{} }

func (a *blockingAdmit) Admit(ctx context.Context, _ string, _ int) error {
	select {
	case a.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return pipeline.Unavailable(fmt.Errorf("counting this month's appends: %w", ctx.Err()))
}

// TestStopWhileAdmittingLeavesTheRequest: a sequencer stopped (quiet, evicted, handed
// over) while its batch waits for the admitter answers nothing, so no append gets a
// 503 for the stop alone: the request stays in SVC_APPEND and the next sequencer
// proves it. While the batch is in process the sequencer counts as active, so the
// service does not pick it as quiet.
func TestStopWhileAdmittingLeavesTheRequest(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	dir := t.TempDir()
	adm := &blockingAdmit{entered: make(chan struct{}, 1)}
	c := startOneRequest(t, nc, Config{Tenant: "acme", Conn: nc, Dir: dir, Signer: receipt.KeySigner{Key: key}, LogID: "acme-log", Admit: adm}, adm.entered, "admitter")
	time.Sleep(50 * time.Millisecond)
	if since := time.Since(c.s.LastActive()); since > 10*time.Millisecond {
		t.Fatalf("a sequencer in the middle of a batch looks idle for %s", since)
	}
	c.stopAnswersNothing(t)

	next := startSequencer(t, nc, dir, key)
	<-next.Ready()
	if as := readBundleReply(t, c.replies, 1); leafIndex(t, as[0]) != 0 {
		t.Fatalf("answers: %+v", as)
	}
}

// inProcess is a sequencer of tenant acme with one bundle request (leaf "one") in
// process; replies gets the request's answer.
type inProcess struct {
	s       *Sequencer
	cancel  context.CancelFunc
	done    chan error
	replies chan *nats.Msg
}

// startOneRequest runs a sequencer of cfg, sends it the request and waits until
// entered says the batch reached what.
func startOneRequest(t *testing.T, nc *nats.Conn, cfg Config, entered <-chan struct{}, what string) *inProcess {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &inProcess{s: s, cancel: cancel, done: make(chan error, 1), replies: make(chan *nats.Msg, 4)}
	go func() { c.done <- s.Run(ctx) }()
	<-s.Ready()
	inbox := nats.NewInbox()
	sub, _ := nc.ChanSubscribe(inbox, c.replies)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.PublishMsg(pipeline.NewBundleRequest("acme", []pipeline.Leaf{pipeline.NewLeaf([]byte("one"))}, inbox)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the batch never reached the " + what)
	}
	return c
}

// stopAnswersNothing stops the sequencer and requires that the stop answered nothing.
func (c *inProcess) stopAnswersNothing(t *testing.T) {
	t.Helper()
	c.cancel()
	if err := <-c.done; err != nil {
		t.Fatalf("Run after its stop: %v", err)
	}
	c.s.Close()
	select {
	case m := <-c.replies:
		t.Fatalf("the stop answered the request: %s %q", m.Header.Get(pipeline.HeaderStatus), m.Data)
	case <-time.After(500 * time.Millisecond):
	}
}

// stallingSigner stalls its first signature until the sequencer's context ends, as a
// signer service does when the process stops mid-request.
type stallingSigner struct {
	receipt.KeySigner
	entered chan struct{}
	once    sync.Once
}

func (s *stallingSigner) SignEnvelope(ctx context.Context, payloadType string, payload []byte) (*receipt.Envelope, error) {
	stall := false
	s.once.Do(func() { stall = true })
	if stall {
		close(s.entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.KeySigner.SignEnvelope(ctx, payloadType, payload)
}

// TestStopWhileSigningLeavesTheRequest: a sequencer stopped while it has its batch's
// head signed (the leaves committed) answers nothing either; the next sequencer
// proves the request at the index committed.
func TestStopWhileSigningLeavesTheRequest(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	dir := t.TempDir()
	sg := &stallingSigner{KeySigner: receipt.KeySigner{Key: key}, entered: make(chan struct{})}
	c := startOneRequest(t, nc, Config{Tenant: "acme", Conn: nc, Dir: dir, Signer: sg, LogID: "acme-log"}, sg.entered, "signer")
	c.stopAnswersNothing(t)
	next := startSequencer(t, nc, dir, key)
	<-next.Ready()
	if as := readBundleReply(t, c.replies, 1); leafIndex(t, as[0]) != 0 {
		t.Fatalf("answers: %+v", as)
	}
	if next.Tree().Size() != 1 {
		t.Fatalf("tree size %d after the retry, want 1", next.Tree().Size())
	}
}
