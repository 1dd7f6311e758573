package sequencer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// TestShorterLogOfRecordStopsTheSequencer: when SVC_LEAVES loses the tenant's last
// committed batches (a NATS node restarted with a truncated store, as Jepsen found
// NATS 2.12.1 could), the sequencer's next commit is refused by the fence; it must
// then see that the log of record is shorter than its tree, stop with ErrShorterLog
// (not ErrFenced, which would hand the tenant to another sequencer that reuses the
// lost indices) and give no index. A sequencer started on the same tree store refuses
// too.
func TestShorterLogOfRecordStopsTheSequencer(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	dir := t.TempDir()
	c, _ := pipeline.NewClient(nc, pipeline.ClientConfig{Timeout: 2 * time.Second})
	run := func() (*Sequencer, chan error, context.CancelFunc) {
		s, err := New(Config{Tenant: "acme", Conn: nc, Dir: dir, Signer: receipt.KeySigner{Key: key}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		return s, done, cancel
	}
	s, done, cancel := run()
	defer cancel()
	<-s.Ready()
	for i := range 5 {
		if _, err := c.Append(context.Background(), "acme", pipeline.NewLeaf([]byte(fmt.Sprint("leaf ", i)))); err != nil {
			t.Fatal(err)
		}
	}
	// The broker loses the last batch on the tenant's subject.
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	st, err := js.Stream(ctx, pipeline.LeavesStream)
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(ctx, pipeline.LeavesSubject("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, last.Sequence); err != nil {
		t.Fatal(err)
	}
	if p, err := c.Append(ctx, "acme", pipeline.NewLeaf([]byte("after the loss"))); err == nil {
		t.Fatalf("an append was answered (index %d) on a log of record shorter than the tree", p.Inclusion.LeafIndex)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrShorterLog) || errors.Is(err, ErrFenced) {
			t.Fatalf("sequencer stopped with %v, want ErrShorterLog", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sequencer went on appending to a shorter log of record")
	}
	if n := s.Tree().Size(); n != 5 {
		t.Fatalf("tree holds %d leaves, want the 5 committed", n)
	}
	s.Close()
	// A sequencer restarted on the same tree store refuses as it recovers.
	s2, done2, cancel2 := run()
	defer cancel2()
	select {
	case err := <-done2:
		if !errors.Is(err, ErrShorterLog) {
			t.Fatalf("restarted sequencer: %v, want ErrShorterLog", err)
		}
	case <-s2.Ready():
		t.Fatal("a sequencer started on a tree longer than the log of record")
	case <-time.After(10 * time.Second):
		t.Fatal("restarted sequencer neither refused nor started")
	}
	s2.Close()
}
