package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
)

// ack is a leaf the log acknowledged: where it said the leaf is, and when.
type ack struct {
	tenant string
	leaf   string
	index  uint64
	sent   time.Time // first attempt
	at     time.Time // the 200
}

// head is a signed head the log handed out with an acknowledgement.
type head struct {
	tenant string
	size   uint64
	root   string
}

// load appends unique leaves over HTTP to every process in turn, retrying a leaf
// (same bytes: the log answers a leaf it holds with its existing index) until it is
// acknowledged or the load stops.
type load struct {
	procs   []*svcProc
	tokens  map[string][]string // tenant → tokens (the front limits each token to logserver.AppendRate)
	workers int                 // per tenant; worker w uses token w mod len
	pace    time.Duration       // pause between a worker's appends (0: none)

	mu       sync.Mutex
	acks     []ack
	heads    []head
	lat      []time.Duration // first attempt to acknowledgement
	retries  int
	wg       sync.WaitGroup
	cancel   context.CancelFunc
	hc       *http.Client
	statuses map[int]int
}

func (l *load) start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.hc = &http.Client{Timeout: 15 * time.Second}
	l.statuses = map[int]int{}
	for tenant, tokens := range l.tokens {
		for w := range l.workers {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				l.worker(ctx, tenant, tokens[w%len(tokens)], w)
			}()
		}
	}
}

// pace sets the pause between a worker's appends.
func (l *load) setPace(d time.Duration) {
	l.mu.Lock()
	l.pace = d
	l.mu.Unlock()
}

func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

func (l *load) worker(ctx context.Context, tenant, token string, w int) {
	for n := 0; ctx.Err() == nil; n++ {
		leaf := fmt.Sprintf("%s w%d n%d %d", tenant, w, n, time.Now().UnixNano())
		sent := time.Now()
		for attempt := 0; ctx.Err() == nil; attempt++ {
			p := l.procs[(w+n+attempt)%len(l.procs)]
			base := p.Base()
			proof, code, err := l.append(ctx, base, tenant, token, leaf)
			if err == nil {
				var th receipt.TreeHead
				if err := proof.TreeHead.DecodePayload(receipt.PayloadTreeHead, &th); err != nil {
					panic(fmt.Sprintf("append answer's tree head: %v", err))
				}
				l.mu.Lock()
				l.acks = append(l.acks, ack{tenant: tenant, leaf: leaf, index: proof.Inclusion.LeafIndex, sent: sent, at: time.Now()})
				l.heads = append(l.heads, head{tenant: tenant, size: th.TreeSize, root: th.RootHash})
				l.lat = append(l.lat, time.Since(sent))
				l.retries += attempt
				l.mu.Unlock()
				break
			}
			l.mu.Lock()
			l.statuses[code]++
			l.mu.Unlock()
			pause := 100 * time.Millisecond
			if code == http.StatusTooManyRequests {
				pause = 300 * time.Millisecond
			}
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
		l.mu.Lock()
		pace := l.pace
		l.mu.Unlock()
		if pace > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(pace):
			}
		}
	}
}

func (l *load) append(ctx context.Context, base, tenant, token, leaf string) (*receipt.Proof, int, error) {
	if base == "" {
		return nil, 0, fmt.Errorf("process down")
	}
	body, _ := json.Marshal(map[string]string{"leaf": leaf})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/t/"+tenant+"/append", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, fmt.Errorf("append: %d %s", resp.StatusCode, data)
	}
	var p receipt.Proof
	if err := json.Unmarshal(data, &p); err != nil || p.TreeHead == nil {
		return nil, resp.StatusCode, fmt.Errorf("append answer %s: %v", data, err)
	}
	return &p, resp.StatusCode, nil
}

// snapshot copies what the load recorded so far.
func (l *load) snapshot() ([]ack, []head, []time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acks), slices.Clone(l.heads), slices.Clone(l.lat)
}

// ackedSince counts tenant's acknowledgements of leaves first sent after t0.
func (l *load) ackedSince(tenant string, t0 time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.acks {
		if a.tenant == tenant && a.sent.After(t0) {
			n++
		}
	}
	return n
}

// waitRecovered waits until every tenant acknowledged a leaf first sent after t0,
// and returns how long that took from t0.
func (l *load) waitRecovered(t testing.TB, t0 time.Time, within time.Duration) time.Duration {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok := true
		for tenant := range l.tokens {
			if l.ackedSince(tenant, t0) == 0 {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			l.mu.Lock()
			st := fmt.Sprint(l.statuses)
			l.mu.Unlock()
			t.Fatalf("no acknowledgement for every tenant within %s of the fault (failed attempts by status: %s)", within, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The outage producers saw: the longest gap between acknowledgements of one
	// tenant from the fault on.
	acks, _, _ := l.snapshot()
	var worst time.Duration
	for tenant := range l.tokens {
		var times []time.Time
		for _, a := range acks {
			if a.tenant == tenant && !a.at.Before(t0.Add(-time.Second)) {
				times = append(times, a.at)
			}
		}
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		prev := t0
		for _, at := range times {
			if at.After(prev) {
				worst = max(worst, at.Sub(prev))
				prev = at
			}
		}
	}
	return worst
}

// p99 of the latencies from first attempt to acknowledgement.
func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[len(s)*99/100]
}

// verify reads each tenant's final log and checks the load's record against it:
// every acknowledged leaf at the index it was given and nowhere else, no leaf twice,
// every head handed out a prefix of the final tree.
func (l *load) verify(t testing.TB) {
	t.Helper()
	acks, heads, _ := l.snapshot()
	for tenant, tokens := range l.tokens {
		token := tokens[0]
		var want uint64
		for _, a := range acks {
			if a.tenant == tenant {
				want = max(want, a.index+1)
			}
		}
		var hashes []merkle.Hash
		// Every process must serve the same log (the read-only trees follow the holder).
		for _, p := range l.procs {
			var got []merkle.Hash
			testkit.Eventually(t, 60*time.Second, func() error {
				var err error
				got, err = fetchLeaves(l.hc, p.Base(), tenant, token)
				if err == nil && uint64(len(got)) < want {
					err = fmt.Errorf("%s serves %d leaves of %s, %d acknowledged", p.name, len(got), tenant, want)
				}
				return err
			})
			if hashes == nil || len(got) > len(hashes) {
				hashes = got
			}
		}
		where := map[merkle.Hash][]uint64{}
		for i, h := range hashes {
			where[h] = append(where[h], uint64(i))
		}
		for h, at := range where {
			if len(at) > 1 {
				t.Errorf("tenant %s: leaf %s at %d indexes %v", tenant, h, len(at), at)
			}
		}
		n := 0
		for _, a := range acks {
			if a.tenant != tenant {
				continue
			}
			n++
			h := merkle.LeafHash([]byte(a.leaf))
			if a.index >= uint64(len(hashes)) || hashes[a.index] != h {
				t.Errorf("tenant %s: acknowledged leaf %q at %d is not there (found at %v)", tenant, a.leaf, a.index, where[h])
			}
		}
		tree, err := merkle.NewTree(merkle.NewMemoryStore())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tree.AppendBatch(hashes); err != nil {
			t.Fatal(err)
		}
		nh := 0
		for _, hd := range heads {
			if hd.tenant != tenant {
				continue
			}
			nh++
			root, err := tree.RootAt(hd.size)
			if err != nil || root.String() != hd.root {
				t.Errorf("tenant %s: head handed out at size %d (root %s) is not a prefix of the final log of %d leaves (%s, %v)", tenant, hd.size, hd.root, len(hashes), root, err)
			}
		}
		t.Logf("tenant %s: %d acknowledged leaves and %d heads checked against the final log of %d leaves", tenant, n, nh, len(hashes))
	}
}

func fetchLeaves(hc *http.Client, base, tenant, token string) ([]merkle.Hash, error) {
	if base == "" {
		return nil, fmt.Errorf("process down")
	}
	var out []merkle.Hash
	for {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/t/%s/leaves?since=%d", base, tenant, len(out)), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		var page struct {
			Size   uint64   `json:"size"`
			Leaves []string `json:"leaves"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("leaves of %s: %d %v", tenant, resp.StatusCode, err)
		}
		for _, s := range page.Leaves {
			h, err := merkle.ParseHash(s)
			if err != nil {
				return nil, err
			}
			out = append(out, h)
		}
		if uint64(len(out)) >= page.Size || len(page.Leaves) == 0 {
			return out, nil
		}
	}
}
