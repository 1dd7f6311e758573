package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// fakeSequencer takes a tenant's append requests on the broker and answers them only
// when told, so a test controls when a bundle's slot frees.
type fakeSequencer struct {
	nc   *nats.Conn
	reqs chan *nats.Msg
}

func newFakeSequencer(t *testing.T) *fakeSequencer {
	t.Helper()
	srv := testkit.ListeningBroker(t)
	nc, err := nats.Connect(natsembed.URL(srv, "pw-of-tests"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	f := &fakeSequencer{nc: nc, reqs: make(chan *nats.Msg, 64)}
	if _, err := nc.ChanSubscribe(pipeline.AppendSubject("acme"), f.reqs); err != nil {
		t.Fatal(err)
	}
	return f
}

// next is the next request's leaf count (1 for a single request).
func (f *fakeSequencer) next(t *testing.T) (*nats.Msg, int) {
	t.Helper()
	select {
	case m := <-f.reqs:
		return m, pipeline.RequestLeaves(m.Header)
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the sequencer")
	}
	return nil, 0
}

// answer answers m with a proof per leaf.
func (f *fakeSequencer) answer(t *testing.T, m *nats.Msg, n int) {
	t.Helper()
	inbox := m.Header.Get(pipeline.HeaderReply)
	var out *nats.Msg
	if m.Header.Get(pipeline.HeaderKind) != pipeline.KindBundle {
		out = nats.NewMsg(inbox)
		out.Header.Set(pipeline.HeaderStatus, pipeline.StatusOK)
		out.Data = []byte(`{}`)
	} else {
		answers := make([]pipeline.BundleAnswer, n)
		for i := range answers {
			answers[i].Inclusion = []byte(fmt.Sprintf(`{"leafIndex":%d}`, i))
		}
		var err error
		if out, err = pipeline.EncodeBundleReply(inbox, []byte(`{}`), answers); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.nc.PublishMsg(out); err != nil {
		t.Fatal(err)
	}
}

// TestLingerGathersTheNextBundle: after a bundle showed concurrency, an append that
// finds the slot free waits (at most the last round trip, BundleLinger) for as many
// appends as that bundle carried, and they leave together instead of the first alone
// with the others a round trip behind it. Without concurrency nothing waits: after a
// bundle of one leaf, the next append leaves at once.
func TestLingerGathersTheNextBundle(t *testing.T) {
	f := newFakeSequencer(t)
	c, err := pipeline.NewClient(f.nc, pipeline.ClientConfig{Bundle: 8, Timeout: time.Minute, Retries: -1, ResendAfter: -1, BundleLinger: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var wg sync.WaitGroup
	appendN := func(from, n int) {
		for i := from; i < from+n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				if _, err := c.DoRaw(context.Background(), "acme", pipeline.NewLeaf([]byte(fmt.Sprintf("leaf %d", i)))); err != nil {
					t.Errorf("append %d: %v", i, err)
				}
			}(i)
		}
	}
	// No concurrency seen yet: the first append leaves at once, alone; two more wait
	// behind it and leave together when it is answered.
	appendN(0, 1)
	m, n := f.next(t)
	if n != 1 {
		t.Fatalf("first request carried %d leaves, want 1", n)
	}
	appendN(1, 2)
	testkit.Eventually(t, 10*time.Second, func() error {
		if p := c.Pending("acme"); p != 2 {
			return fmt.Errorf("%d appends wait behind the slot", p)
		}
		return nil
	})
	f.answer(t, m, 1)
	if m, n = f.next(t); n != 2 {
		t.Fatalf("second request carried %d leaves, want the 2 that waited", n)
	}
	// A slow round trip (2 s): the linger may wait as long for the next bundle.
	time.Sleep(2 * time.Second)
	f.answer(t, m, 2)
	wg.Wait()
	// The last bundle carried 2: a lone append waits for a second, and they leave as one.
	appendN(3, 1)
	testkit.Eventually(t, 10*time.Second, func() error {
		if p := c.Pending("acme"); p != 1 {
			return fmt.Errorf("%d appends wait", p)
		}
		return nil
	})
	appendN(4, 1)
	if m, n = f.next(t); n != 2 {
		t.Fatalf("after the linger, a request of %d leaves; want the 2 appends together", n)
	}
	f.answer(t, m, 2)
	wg.Wait()
	// Company that does not come: the lone append leaves after the last round trip
	// (here well under the minute BundleLinger allows).
	start := time.Now()
	appendN(5, 1)
	if m, n = f.next(t); n != 1 {
		t.Fatalf("lone append: a request of %d leaves", n)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the lone append waited %s, more than the last round trip (2 s)", waited)
	}
	time.Sleep(time.Second) // a round trip of a second, which a linger would wait
	f.answer(t, m, 1)
	wg.Wait()
	// The last request carried one leaf: no concurrency, so the next leaves at once,
	// long before any linger (the last round trip, a second) could end.
	start = time.Now()
	appendN(6, 1)
	if m, n = f.next(t); n != 1 {
		t.Fatalf("a lone append after a lone one: a request of %d leaves", n)
	}
	if waited := time.Since(start); waited > 500*time.Millisecond {
		t.Fatalf("a lone append with no concurrency seen waited %s", waited)
	}
	f.answer(t, m, n)
	wg.Wait()
}
