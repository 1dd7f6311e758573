package sequencer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// TestBundlingClientCoalescesAndProvesEachLeaf: 64 concurrent callers through one
// bundling client; the broker carries bundles, and every caller still gets its own
// proof under a signed head, or its own refusal.
func TestBundlingClientCoalescesAndProvesEachLeaf(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	seq := startSequencer(t, nc, t.TempDir(), key)
	<-seq.Ready()
	var bundles, singles atomic.Int64
	sub, err := nc.Subscribe(pipeline.AppendSubject("acme"), func(m *nats.Msg) {
		if m.Header.Get(pipeline.HeaderKind) == pipeline.KindBundle {
			bundles.Add(1)
		} else {
			singles.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	c, err := pipeline.NewClient(nc, pipeline.ClientConfig{Bundle: 32, Timeout: 10 * time.Second, Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const callers, each = 64, 20
	seen := &indices{}
	concurrently(callers, func(p int) {
		for i := 0; i < each; i++ {
			if i == 5 { // a leaf refused on its own, amid the others of its bundle
				_, err := c.Do(context.Background(), "acme", pipeline.NewLeaf([]byte("bad \xff utf-8")))
				if !errors.Is(err, pipeline.ErrInvalid) {
					t.Errorf("invalid leaf: %v", err)
				}
			}
			if !seen.append(t, key, c.Do, []byte(fmt.Sprintf(`{"caller":%d,"i":%d}`, p, i))) {
				return
			}
		}
	})
	if len(seen.m) != callers*each || seq.Tree().Size() != callers*each {
		t.Fatalf("%d distinct indices, tree size %d; want %d", len(seen.m), seq.Tree().Size(), callers*each)
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if bundles.Load()+singles.Load() < callers*each/32 {
			return fmt.Errorf("%d requests seen", bundles.Load()+singles.Load())
		}
		return nil
	})
	if bundles.Load() == 0 {
		t.Fatalf("64 concurrent callers sent %d single requests and no bundle", singles.Load())
	}
	t.Logf("%d appends in %d bundles and %d single requests", callers*(each+1), bundles.Load(), singles.Load())
	// A retry through the bundling client gets the existing index.
	p, err := c.Do(context.Background(), "acme", pipeline.NewLeaf([]byte(seen.m[7])))
	if err != nil || p.Inclusion.LeafIndex != 7 {
		t.Fatalf("retry of leaf 7: %v %+v", err, p)
	}
}

// bundleAnswers publishes a bundle of leaves straight to the append subject and
// returns the reply's answers.
func bundleAnswers(t *testing.T, nc *nats.Conn, inbox string, replies <-chan *nats.Msg, leaves ...pipeline.Leaf) []pipeline.BundleAnswer {
	t.Helper()
	if err := nc.PublishMsg(pipeline.NewBundleRequest("acme", leaves, inbox)); err != nil {
		t.Fatal(err)
	}
	return readBundleReply(t, replies, len(leaves))
}

func readBundleReply(t *testing.T, replies <-chan *nats.Msg, n int) []pipeline.BundleAnswer {
	t.Helper()
	select {
	case m := <-replies:
		if st := m.Header.Get(pipeline.HeaderStatus); st != pipeline.StatusBundle {
			t.Fatalf("reply status %q (%s)", st, m.Data)
		}
		head, as, err := pipeline.DecodeBundleReply(m.Data)
		if err != nil || len(as) != n {
			t.Fatalf("bundle reply: %v, %d answers for %d leaves", err, len(as), n)
		}
		if len(head) > 0 && !json.Valid(head) {
			t.Fatalf("head is not JSON: %q", head)
		}
		return as
	case <-time.After(15 * time.Second):
		t.Fatal("no reply to the bundle")
	}
	return nil
}

func leafIndex(t *testing.T, a pipeline.BundleAnswer) uint64 {
	t.Helper()
	if a.Refusal != nil {
		t.Fatalf("refused: %v", a.Refusal)
	}
	var inc struct {
		LeafIndex uint64 `json:"leafIndex"`
	}
	if err := json.Unmarshal(a.Inclusion, &inc); err != nil {
		t.Fatal(err)
	}
	return inc.LeafIndex
}

// TestRedeliveredBundleAssignsNoIndexTwice: the sequencer commits and answers a
// bundle, then dies before its ack (a kill -9 between the two). The broker redelivers
// the bundle to the next sequencer, which answers every leaf with the index it already
// has, and the log does not grow.
func TestRedeliveredBundleAssignsNoIndexTwice(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	dir := t.TempDir()
	replies := make(chan *nats.Msg, 4)
	inbox := nats.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	s1, err := New(Config{Tenant: "acme", Conn: nc, Dir: dir, Signer: receipt.KeySigner{Key: key}, LogID: "acme-log"})
	if err != nil {
		t.Fatal(err)
	}
	crash := errors.New("killed before the ack")
	s1.beforeAck = func() error { return crash }
	done := make(chan error, 1)
	go func() { done <- s1.Run(context.Background()) }()
	<-s1.Ready()
	leaves := []pipeline.Leaf{pipeline.NewLeaf([]byte(`{"b":1}`)), pipeline.NewLeaf([]byte(`{"b":2}`)), pipeline.NewLeaf([]byte(`{"b":3}`))}
	first := bundleAnswers(t, nc, inbox, replies, leaves...)
	if err := <-done; !errors.Is(err, crash) {
		t.Fatalf("first sequencer: %v", err)
	}
	s1.Close()

	s2 := startSequencer(t, nc, dir, key) // same tree store and consumer: the redelivery comes here
	again := readBundleReply(t, replies, len(leaves))
	for i := range leaves {
		if a, b := leafIndex(t, first[i]), leafIndex(t, again[i]); a != b {
			t.Fatalf("leaf %d: index %d, then %d after the redelivery", i, a, b)
		}
	}
	if s2.Tree().Size() != 3 {
		t.Fatalf("tree size %d after a redelivered bundle of 3", s2.Tree().Size())
	}
}

// quotaOf admits the first `left` fresh leaves, then refuses as a monthly quota does.
type quotaOf struct{ left int }

func (q *quotaOf) Admit(ctx context.Context, tenant string, n int) error {
	_, err := q.AdmitUpTo(ctx, tenant, n)
	return err
}

func (q *quotaOf) AdmitUpTo(_ context.Context, _ string, n int) (int, error) {
	k := min(n, q.left)
	q.left -= k
	if k < n {
		return k, pipeline.Refuse(pipeline.ErrQuota, 3600, "monthly quota reached: 2 appends")
	}
	return k, nil
}

// TestBundleRefusalsStayPerLeaf: in one bundle, a leaf over the quota, a too-large
// leaf and a leaf hash of the wrong size are each refused with their own reason, and
// the others are proven; a bundle malformed as a whole gets one refusal.
func TestBundleRefusalsStayPerLeaf(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	s, err := New(Config{Tenant: "acme", Conn: nc, Dir: t.TempDir(), Signer: receipt.KeySigner{Key: key}, LogID: "acme-log", Admit: &quotaOf{left: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done; s.Close() }()
	<-s.Ready()
	replies := make(chan *nats.Msg, 4)
	inbox := nats.NewInbox()
	sub, _ := nc.ChanSubscribe(inbox, replies)
	defer sub.Unsubscribe()

	big := pipeline.NewLeaf([]byte(strings.Repeat("x", pipeline.MaxLeafBytes+1)))
	as := bundleAnswers(t, nc, inbox, replies,
		pipeline.NewLeaf([]byte("one")), big, pipeline.NewLeaf([]byte("two")), pipeline.NewLeaf([]byte("one")), pipeline.NewLeaf([]byte("three")))
	if leafIndex(t, as[0]) != 0 || leafIndex(t, as[2]) != 1 || leafIndex(t, as[3]) != 0 {
		t.Fatalf("proven leaves: %+v", as)
	}
	if as[1].Refusal == nil || !errors.Is(as[1].Refusal, pipeline.ErrTooLarge) {
		t.Fatalf("too-large leaf: %+v", as[1].Refusal)
	}
	if r := as[4].Refusal; r == nil || !errors.Is(r, pipeline.ErrQuota) || r.RetryAfter != 3600 {
		t.Fatalf("leaf over the quota: %+v", r)
	}

	// A hash of the wrong size is framed by hand: the client cannot build one.
	bad := pipeline.NewBundleRequest("acme", []pipeline.Leaf{pipeline.NewLeaf([]byte("one")), {}}, inbox)
	bad.Data = append(bad.Data[:len(bad.Data)-37], 1, 0, 0, 0, 2, 7, 7) // the second leaf: a hash of 2 bytes
	if err := nc.PublishMsg(bad); err != nil {
		t.Fatal(err)
	}
	as = readBundleReply(t, replies, 2)
	if leafIndex(t, as[0]) != 0 || as[1].Refusal == nil || !errors.Is(as[1].Refusal, pipeline.ErrInvalid) {
		t.Fatalf("short hash: %+v", as)
	}

	m := nats.NewMsg(pipeline.AppendSubject("acme"))
	m.Header.Set(pipeline.HeaderKind, pipeline.KindBundle)
	m.Header.Set(pipeline.HeaderReply, inbox)
	m.Data = []byte("SVQ1\x00\x00\x00\x09")
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-replies:
		rep, err := pipeline.DecodeReply(r)
		if err != nil || rep.Refusal == nil || !errors.Is(rep.Refusal, pipeline.ErrInvalid) || !strings.Contains(rep.Refusal.Message, "malformed bundle") {
			t.Fatalf("malformed bundle: %v %+v", err, rep)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to a malformed bundle")
	}
	if s.Tree().Size() != 2 {
		t.Fatalf("tree size %d, want 2", s.Tree().Size())
	}
}

// TestBundleSlotFreedByTimeout: a bundle that gets no answer (no sequencer yet) fails
// its callers after Timeout and frees the tenant's slot, so the appends after it go
// through once a sequencer runs.
func TestBundleSlotFreedByTimeout(t *testing.T) {
	nc := testBroker(t)
	key, _ := signer.GenerateKey()
	c, err := pipeline.NewClient(nc, pipeline.ClientConfig{Bundle: 8, Timeout: time.Second, Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := c.Do(context.Background(), "acme", pipeline.NewLeaf([]byte(fmt.Sprintf("unanswered %d", i))))
			if !errors.Is(err, pipeline.ErrUnavailable) {
				t.Errorf("append without a sequencer: %v", err)
			}
		}(i)
	}
	wg.Wait()
	seq := startSequencer(t, nc, t.TempDir(), key)
	<-seq.Ready()
	seen := &indices{}
	for i := 0; i < 3; i++ {
		leaf := []byte(fmt.Sprintf("after %d", i))
		p, err := c.Do(context.Background(), "acme", pipeline.NewLeaf(leaf))
		if err != nil {
			t.Fatalf("append after the timeouts: %v", err)
		}
		seen.add(t, key, leaf, p)
	}
}
