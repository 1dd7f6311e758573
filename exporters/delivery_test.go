package exporters_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/exporters"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
)

var fast = exporters.QueueConfig{MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Batch: 16}

func issueN(t *testing.T, n int) ([]*receipt.Bundle, []string) {
	t.Helper()
	ti := newTestIssuer(t, receipt.KindSDK)
	var bs []*receipt.Bundle
	var ids []string
	for i := 0; i < n; i++ {
		b := ti.simple(t)
		bs = append(bs, b)
		ids = append(ids, recordOf(t, b).ReceiptID)
	}
	return bs, ids
}

// Standalone: the collector is down for a while, then back. Every receipt reaches both
// exporters exactly once, none is lost, and stderr stays silent.
func TestQueueRidesOutAnOutage(t *testing.T) {
	c := newCollector(t)
	c.down.Store(true)
	var stderr testkit.LockedBuffer
	q := exporters.NewQueue(c.both(t), fast, &stderr)
	bs, ids := issueN(t, 60)
	start := time.Now()
	for _, b := range bs {
		q.Export(context.Background(), b)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Export blocked for %s while the collector was down", d)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if n, _ := c.counts("otel"); n != 0 {
		t.Fatalf("delivered %d while down", n)
	}
	downReqs := c.reqs.Load()
	if downReqs < 4 {
		t.Fatalf("only %d attempts while down: not retrying", downReqs)
	}
	c.down.Store(false)
	c.waitFor(t, ids, []string{"otel", "splunk"}, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"otel", "splunk"} {
		if n, dup := c.counts(w); n != len(ids) || dup != 1 {
			t.Errorf("%s: %d distinct receipts (want %d), at most %d deliveries each (want 1)", w, n, len(ids), dup)
		}
	}
	if st := q.Stats(); st.Exported != uint64(2*len(ids)) || st.Dropped != 0 {
		t.Errorf("stats %+v", st)
	}
	if stderr.String() != "" {
		t.Errorf("stderr: %s", stderr.String())
	}
}

// The queue is bounded: past its size an export is dropped at once with one line.
func TestQueueFullDropsWithOneLineEach(t *testing.T) {
	c := newCollector(t)
	c.down.Store(true)
	var stderr testkit.LockedBuffer
	exps, err := exporters.Build(exporters.Config{OTel: &exporters.OTelConfig{URL: c.srv.URL}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fast
	cfg.Size, cfg.Batch = 2, 1
	q := exporters.NewQueue(exps, cfg, &stderr)
	bs, ids := issueN(t, 8)
	for _, b := range bs {
		q.Export(context.Background(), b)
	}
	c.down.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := q.Stats()
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if st.Dropped == 0 || st.Exported+st.Dropped != uint64(len(ids)) || len(lines) != int(st.Dropped) {
		t.Fatalf("stats %+v, %d lines:\n%s", st, len(lines), stderr.String())
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "svc: otel export of receipt ") || !strings.HasSuffix(l, "dropped: queue full") {
			t.Errorf("line %q", l)
		}
	}
	if n, _ := c.counts("otel"); uint64(n) != st.Exported {
		t.Errorf("collector has %d, stats say %d", n, st.Exported)
	}
}

// Retry is bounded in time: an export the collector never accepts is dropped after
// MaxAge with one line naming the receipt.
func TestQueueGivesUpAfterMaxAge(t *testing.T) {
	c := newCollector(t)
	c.down.Store(true)
	var stderr testkit.LockedBuffer
	cfg := fast
	cfg.MaxAge = 200 * time.Millisecond
	q := exporters.NewQueue(c.both(t), cfg, &stderr)
	bs, ids := issueN(t, 3)
	for _, b := range bs {
		q.Export(context.Background(), b)
	}
	deadline := time.Now().Add(5 * time.Second)
	for q.Stats().Dropped < 6 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	q.Close(context.Background())
	out := stderr.String()
	if got := strings.Count(out, "\n"); got != 6 {
		t.Fatalf("%d lines, want 6 (3 receipts x 2 exporters):\n%s", got, out)
	}
	for _, id := range ids {
		for _, w := range []string{"otel", "splunk"} {
			if !strings.Contains(out, "svc: "+w+" export of receipt "+id+" dropped: collector did not accept it within 200ms") {
				t.Errorf("no %s line for %s:\n%s", w, id, out)
			}
		}
	}
}

// A batch the collector refuses for good is retried record by record: only the bad
// record is dropped.
func TestPermanentRefusalDropsOnlyTheBadRecord(t *testing.T) {
	c := newCollector(t)
	bs, ids := issueN(t, 5)
	c.reject[ids[2]] = true
	var stderr testkit.LockedBuffer
	q := exporters.NewQueue(c.both(t), fast, &stderr)
	for _, b := range bs {
		q.Export(context.Background(), b)
	}
	good := append(append([]string{}, ids[:2]...), ids[3:]...)
	c.waitFor(t, good, []string{"otel", "splunk"}, 5*time.Second)
	q.Close(context.Background())
	if missing := c.has("otel", ids[2:3]); len(missing) != 1 {
		t.Error("the refused record was delivered")
	}
	out := stderr.String()
	if strings.Count(out, "\n") != 2 || !strings.Contains(out, "receipt "+ids[2]+" dropped") || !strings.Contains(out, "400") {
		t.Errorf("stderr:\n%s", out)
	}
}

// Close with a deadline drops what is left, one line each, and never hangs.
func TestCloseDeadlineDrops(t *testing.T) {
	c := newCollector(t)
	c.down.Store(true)
	var stderr testkit.LockedBuffer
	q := exporters.NewQueue(c.both(t), fast, &stderr)
	bs, _ := issueN(t, 4)
	for _, b := range bs {
		q.Export(context.Background(), b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := q.Close(ctx); err == nil {
		t.Fatal("Close reported success with exports left")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %s", d)
	}
	if got := strings.Count(stderr.String(), "\n"); got != 8 || q.Stats().Dropped != 8 {
		t.Fatalf("%d lines, stats %+v:\n%s", got, q.Stats(), stderr.String())
	}
	q.Export(context.Background(), bs[0])
	if !strings.Contains(stderr.String(), "the exporter is closed") {
		t.Error("export after Close not reported")
	}
}

// Through the pipeline: receipts go to SVC_RECEIPTS and the exporters are durable
// consumers. The collector is down; the process stops (Close) with nothing delivered;
// a new process with the same tenant starts, the collector comes back, and every
// receipt arrives exactly once. Nothing is acknowledged before the collector accepted.
func TestStreamSinkDurableAcrossOutageAndRestart(t *testing.T) {
	nc := startBroker(t)
	c := newCollector(t)
	c.down.Store(true)
	var stderr testkit.LockedBuffer
	opts := exporters.StreamOptions{Stderr: &stderr, Queue: fast}
	sink, err := exporters.NewStreamSink(context.Background(), nc, "acme", c.both(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	bs, ids := issueN(t, 40)
	for _, b := range bs {
		sink.Export(context.Background(), b)
		sink.Export(context.Background(), b) // a duplicate publish is stored once (Nats-Msg-Id)
	}
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := js.Stream(context.Background(), exporters.ReceiptsStream)
		if err != nil {
			t.Fatal(err)
		}
		if st.CachedInfo().State.Msgs == uint64(len(ids)) {
			break
		}
		info, _ := st.Info(context.Background())
		if info.State.Msgs == uint64(len(ids)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream holds %d messages, want %d", info.State.Msgs, len(ids))
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // consumers retry against the dead collector
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.counts("otel"); n != 0 {
		t.Fatalf("%d delivered while down", n)
	}
	for _, w := range []string{"otel", "splunk"} {
		cons, err := js.Consumer(context.Background(), exporters.ReceiptsStream, exporters.ConsumerName(w, "acme"))
		if err != nil {
			t.Fatal(err)
		}
		info, _ := cons.Info(context.Background())
		if info.AckFloor.Stream != 0 {
			t.Fatalf("%s acknowledged up to %d before the collector accepted anything", w, info.AckFloor.Stream)
		}
	}

	// The next process. Let the collector finish requests the first one abandoned.
	for c.inflight.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	c.down.Store(false)
	sink2, err := exporters.NewStreamSink(context.Background(), nc, "acme", c.both(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, ids, []string{"otel", "splunk"}, 15*time.Second)
	deadline = time.Now().Add(5 * time.Second)
	for _, w := range []string{"otel", "splunk"} {
		for {
			cons, _ := js.Consumer(context.Background(), exporters.ReceiptsStream, exporters.ConsumerName(w, "acme"))
			info, _ := cons.Info(context.Background())
			if info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream == uint64(len(ids)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s consumer: %d ack pending, %d pending, ack floor %d", w, info.NumAckPending, info.NumPending, info.AckFloor.Stream)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := sink2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Exactly once by receipt id: every id arrived. A request the first process
	// abandoned at Close may still have been counted by the collector after it came
	// back, so an id can arrive twice (at least once delivery); the receipt id makes
	// that recognisable.
	for _, w := range []string{"otel", "splunk"} {
		n, dup := c.counts(w)
		if n != len(ids) || dup > 2 {
			t.Errorf("%s: %d distinct (want %d), max %d deliveries each", w, n, len(ids), dup)
		}
		if dup > 1 {
			t.Logf("%s: a re-delivery after the restart (max %d deliveries of one receipt)", w, dup)
		}
	}
	if stderr.String() != "" {
		t.Errorf("stderr: %s", stderr.String())
	}
}

// New picks the stream sink with a NATS connection and the queue without, and nil
// without exporters.
func TestNewPicksTheSink(t *testing.T) {
	if s, err := exporters.New(context.Background(), exporters.Config{}, exporters.Options{}); s != nil || err != nil {
		t.Fatalf("no exporters: %v %v", s, err)
	}
	c := newCollector(t)
	cfg := exporters.Config{OTel: &exporters.OTelConfig{URL: c.srv.URL}}
	s, err := exporters.New(context.Background(), cfg, exporters.Options{})
	if _, ok := s.(*exporters.Queue); !ok || err != nil {
		t.Fatalf("standalone: %T %v", s, err)
	}
	s.Close(context.Background())
	_, err = exporters.New(context.Background(), exporters.Config{Splunk: &exporters.SplunkConfig{URL: c.srv.URL, TokenEnv: "EXPORTERS_TEST_UNSET"}}, exporters.Options{})
	if err == nil || !strings.Contains(err.Error(), "splunk.tokenEnv: environment variable EXPORTERS_TEST_UNSET is not set") {
		t.Fatalf("missing token: %v", err)
	}
}
