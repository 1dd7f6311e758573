package logservice

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/signer"
)

// TestNodeLossNoProcessExits: two database-backed processes on a 3-node cluster (R3
// streams, deploy/README's URL form) while appends flow through both; the first-listed
// node, made the leader of SVC_LEAVES, is killed. With two
// of three nodes up, neither process stops (nothing on Err), appends succeed again
// through both, and no index is handed out twice. Before the broker-facing loops
// retried, the holder exited on "commit …: no response from stream" and the standby
// on "read-only tree …: context deadline exceeded".
func TestNodeLossNoProcessExits(t *testing.T) {
	c := testkit.StartCluster(t, 3)
	dbURL, key := pgtest.New(t), mustKey(t)
	var logs testkit.LockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	a, urlA := frontEndWith(t, t.TempDir(), c.URLWithPassword(), dbURL, key, logger, Hosted{LeaseTTL: 2 * time.Second}, 3)
	b, urlB := frontEndWith(t, t.TempDir(), c.URLWithPassword(), dbURL, key, logger, Hosted{LeaseTTL: 2 * time.Second}, 3)
	tok := addTenant(t, a, "acme")
	testkit.Eventually(t, 10*time.Second, func() error {
		if s, body := appendTo(t, urlB, "acme", tok, "probe"); s != 200 {
			return fmt.Errorf("append through b: %d %s", s, body)
		}
		return nil
	})
	ld := appendLoad(t, []string{urlA, urlB}, tok)
	defer ld.stop()
	time.Sleep(time.Second)
	lc, err := nats.Connect(c.URLs(), nats.UserInfo(testkit.ClusterUser, testkit.ClusterPassword))
	if err != nil {
		t.Fatal(err)
	}
	testkit.LeadStream(t, lc, pipeline.LeavesStream, c.Nodes[0].Name())
	lc.Close()
	t.Logf("killing node 0: the first listed, and the leader of %s", pipeline.LeavesStream)
	killedAt := time.Now()
	c.Kill(0)
	ld.recovered(t, killedAt, 60*time.Second)
	time.Sleep(3 * time.Second) // a process that was to stop has stopped by now
	ld.stop()
	for name, s := range map[string]*Service{"a": a, "b": b} {
		select {
		case err := <-s.Err():
			t.Fatalf("process %s stopped: %v", name, err)
		default:
		}
	}
	if len(ld.twice) > 0 {
		t.Fatalf("indices handed out twice: %v", ld.twice)
	}
	t.Logf("%d appends acknowledged, longest gap between two %s", ld.count(), ld.longestGap())
}

func mustKey(t *testing.T) *signer.Key {
	k, err := signer.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// load appends through the processes in turn from one goroutine, recording when each
// append was acknowledged and the indices handed out.
type load struct {
	mu      sync.Mutex
	acked   []time.Time
	indices map[uint64]string
	twice   []string
	last    string // the last failure
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func appendLoad(t *testing.T, urls []string, tok string) *load {
	ld := &load{indices: map[uint64]string{}, done: make(chan struct{})}
	ld.wg.Add(1)
	go func() {
		defer ld.wg.Done()
		hc := &http.Client{Timeout: 15 * time.Second}
		for i := 0; ; i++ {
			select {
			case <-ld.done:
				return
			default:
			}
			time.Sleep(25 * time.Millisecond) // under the per-token rate (50/s)
			leaf := fmt.Sprintf("leaf-%d", i)
			req, _ := http.NewRequest(http.MethodPost, client.TenantBase(urls[i%len(urls)], "acme")+"/append", strings.NewReader(fmt.Sprintf(`{"leaf":%q}`, leaf)))
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				ld.fail(err.Error())
				continue
			}
			var out struct {
				Inclusion struct {
					LeafIndex *uint64 `json:"leafIndex"`
				} `json:"inclusion"`
			}
			err = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || err != nil || out.Inclusion.LeafIndex == nil {
				ld.fail(fmt.Sprintf("%s: %v", resp.Status, err))
				continue
			}
			ld.mu.Lock()
			ld.acked = append(ld.acked, time.Now())
			if prev, ok := ld.indices[*out.Inclusion.LeafIndex]; ok && prev != leaf {
				ld.twice = append(ld.twice, fmt.Sprintf("index %d: %s and %s", *out.Inclusion.LeafIndex, prev, leaf))
			}
			ld.indices[*out.Inclusion.LeafIndex] = leaf
			ld.mu.Unlock()
		}
	}()
	return ld
}

func (ld *load) fail(why string) {
	ld.mu.Lock()
	ld.last = why
	ld.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
}

func (ld *load) stop() {
	ld.once.Do(func() { close(ld.done) })
	ld.wg.Wait()
}

// recovered waits until 20 appends were acknowledged after since.
func (ld *load) recovered(t *testing.T, since time.Time, within time.Duration) {
	testkit.Eventually(t, within, func() error {
		ld.mu.Lock()
		defer ld.mu.Unlock()
		n := 0
		for _, at := range ld.acked {
			if at.After(since) {
				n++
			}
		}
		if n < 20 {
			return fmt.Errorf("%d appends acknowledged since the kill; the last failure: %s", n, ld.last)
		}
		return nil
	})
}

func (ld *load) count() int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return len(ld.acked)
}

func (ld *load) longestGap() time.Duration {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var g time.Duration
	for i := 1; i < len(ld.acked); i++ {
		g = max(g, ld.acked[i].Sub(ld.acked[i-1]))
	}
	return g
}
