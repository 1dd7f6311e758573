package faults

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// soakEnv reads a duration from the environment (go tool task soak sets them).
func soakEnv(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a Go duration such as 30m", name, v)
	}
	return d
}

// TestSoak runs the cluster at half the peak rate it measures first, killing a NATS
// node with kill -9 every SVC_SOAK_KILL_EVERY (n0, n1, n2 in turn; back after 20 s),
// and every other time also the process holding a tenant's sequencer. `go tool task soak` runs it
// (DURATION, default 30m; KILL_EVERY, default 5m); it never runs in CI.
func TestSoak(t *testing.T) {
	if os.Getenv("SVC_SOAK_DURATION") == "" {
		t.Skip("run with go tool task soak (SVC_SOAK_DURATION)")
	}
	dur := soakEnv(t, "SVC_SOAK_DURATION", 30*time.Minute)
	every := soakEnv(t, "SVC_SOAK_KILL_EVERY", 5*time.Minute)
	tenants := []string{"default", "acme", "beta"}
	const workers = 8
	r := newRig(t, rigConfig{tenants: tenants, workers: workers, tokens: workers})

	// Peak: every worker appending back to back, each with its own token (the front
	// limits each token to logserver.AppendRate a second per process).
	time.Sleep(3 * time.Second)
	t0 := time.Now()
	time.Sleep(15 * time.Second)
	peak := float64(r.ackedSince(t0)) / time.Since(t0).Seconds()
	// At peak each worker's cycle is W/peak; doubling it halves the rate.
	w := float64(workers * len(tenants))
	r.load.setPace(time.Duration(w / peak * float64(time.Second)))
	t.Logf("peak %.0f appends/s; soaking at about %.0f/s for %s, a fault every %s", peak, peak/2, dur, every)

	start := time.Now()
	_, _, before := r.load.snapshot()
	for k := 0; time.Since(start)+every <= dur; k++ {
		time.Sleep(every - 10*time.Second)
		// Every round a NATS node is killed (n0, the first-listed and log-b's only way
		// in, first); every other round also a tenant's holder once the node is back.
		node := k % 3
		r.c.kill9(node)
		ts := time.Now()
		rec := r.load.waitRecovered(t, ts, 2*time.Minute)
		r.recordVs(fmt.Sprintf("soak: NATS node n%d killed (kill -9)", node), rec, r.raw.gap(ts, time.Minute), "")
		time.Sleep(max(0, 20*time.Second-time.Since(ts)))
		r.c.start(node)
		if k%2 == 1 {
			time.Sleep(5 * time.Second)
			tenant := tenants[k/2%len(tenants)]
			p := r.holderProc(tenant)
			ts := time.Now()
			if err := p.kill9(time.Second); err != nil {
				t.Fatal(err)
			}
			rec := r.load.waitRecovered(t, ts, 2*time.Minute)
			r.record("soak: kill -9 of "+tenant+"'s holder", rec, "("+p.name+")")
		}
	}
	time.Sleep(max(0, dur-time.Since(start)))
	n := r.ackedSince(start)
	_, _, lat := r.load.snapshot()
	rate := float64(n) / time.Since(start).Seconds()
	r.record("soak", 0, fmt.Sprintf("%.0f appends/s over %s (peak %.0f/s), p99 %s",
		rate, time.Since(start).Round(time.Second), peak, p99(lat[len(before):]).Round(time.Millisecond)))
}

// ackedSince counts every tenant's acknowledgements of leaves first sent after t0.
func (r *rig) ackedSince(t0 time.Time) int {
	n := 0
	for tenant := range r.load.tokens {
		n += r.load.ackedSince(tenant, t0)
	}
	return n
}
