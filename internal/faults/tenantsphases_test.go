package faults

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// create makes the busy tenant (enterprise plan, four tokens), then the n tenants
// through the admin API, eight at a time, each with a token and one append, with a
// progress line every five seconds. It returns how many were completed.
func (r *tenantsRun) create() int {
	if err := r.admin("/admin/tenants", map[string]string{"id": "busy"}, nil); err != nil {
		r.t.Fatal(err)
	}
	if err := r.admin("/admin/tenants/busy/plan", map[string]string{"plan": "enterprise"}, nil); err != nil {
		r.t.Fatal(err)
	}
	for i := range 4 {
		var tk struct{ Token string }
		if err := r.admin("/admin/tenants/busy/tokens", map[string]string{"label": fmt.Sprint("busy", i)}, &tk); err != nil {
			r.t.Fatal(err)
		}
		r.busy = append(r.busy, tk.Token)
	}
	var done atomic.Int64
	stop := make(chan struct{})
	t0 := time.Now()
	go every(5*time.Second, stop, func() {
		d := done.Load()
		progress("N=%d: %d tenants created (%.0f/s), RSS %d MiB", r.n, d, float64(d)/time.Since(t0).Seconds(), rss(r.p.pid())>>20)
	})
	defer close(stop)
	var failed atomic.Int64
	r.parallel(r.n, 8, func(i int) {
		if err := r.createOne(i); err != nil {
			if f := failed.Add(1); f <= 3 || f%100 == 0 {
				progress("N=%d: tenant %s not created (%d failures so far): %v", r.n, tenantID(i), f, err)
			}
			return
		}
		done.Add(1)
	})
	return int(done.Load())
}

// createOne adds tenant i, a token for it and its first append (retried on 503 for a
// minute: a tenant's sequencer may still be starting).
func (r *tenantsRun) createOne(i int) error {
	id := tenantID(i)
	if err := r.retry(func() error { return r.admin("/admin/tenants", map[string]string{"id": id}, nil) }); err != nil && !strings.Contains(err.Error(), "exists") {
		return err
	}
	var tk struct{ Token string }
	if err := r.retry(func() error { return r.admin("/admin/tenants/"+id+"/tokens", map[string]string{"label": "bench"}, &tk) }); err != nil {
		return err
	}
	r.tokens[i] = tk.Token
	deadline := time.Now().Add(time.Minute)
	for r.ctx.Err() == nil {
		code, _ := r.appendOne(id, tk.Token, fmt.Sprintf("%s first", id))
		if code == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("first append: %d for a minute", code)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return r.ctx.Err()
}

// busyRun appends to the busy tenant at 100 appends/s (four tokens, 25/s each, open
// loop: latency counts from each append's scheduled time) for d; its p99 and the
// appends not answered 200.
func (r *tenantsRun) busyRun(d time.Duration) (time.Duration, int) {
	var mu sync.Mutex
	var lat []time.Duration
	var bad atomic.Int64
	var wg sync.WaitGroup
	const perToken = 25
	count := int(d.Seconds() * perToken)
	t0 := time.Now()
	for w, token := range r.busy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range count {
				at := t0.Add(time.Duration(k)*time.Second/perToken + time.Duration(w)*10*time.Millisecond)
				time.Sleep(time.Until(at))
				if r.ctx.Err() != nil {
					return
				}
				code, _ := r.appendOne("busy", token, fmt.Sprintf("busy w%d n%d %d", w, k, time.Now().UnixNano()))
				if code != http.StatusOK {
					bad.Add(1)
					continue
				}
				mu.Lock()
				lat = append(lat, time.Since(at))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return p99(lat), int(bad.Load())
}

// restart kills the process with SIGKILL, starts it again and appends to every
// tenant (16 at a time, each retried until answered 200): the time from the kill to
// the last tenant's 200, and the 503s seen on the way.
func (r *tenantsRun) restart() (time.Duration, int, error) {
	t0 := time.Now()
	progress("N=%d: kill -9 and restart", r.n)
	if err := r.p.signal(syscall.SIGKILL); err != nil {
		return 0, 0, err
	}
	if err := r.p.launch(); err != nil {
		return 0, 0, fmt.Errorf("restart: %s", tail(err.Error(), 200))
	}
	progress("N=%d: listening again after %s", r.n, time.Since(t0).Round(time.Millisecond))
	var done, unavailable atomic.Int64
	stop := make(chan struct{})
	go every(5*time.Second, stop, func() {
		progress("N=%d: %d of %d tenants appended since the restart (%d × 503)", r.n, done.Load(), r.n, unavailable.Load())
	})
	defer close(stop)
	r.parallel(r.n, 16, func(i int) {
		for r.ctx.Err() == nil {
			code, _ := r.appendOne(tenantID(i), r.tokens[i], fmt.Sprintf("%s after restart", tenantID(i)))
			if code == http.StatusOK {
				done.Add(1)
				return
			}
			if code == http.StatusServiceUnavailable {
				unavailable.Add(1)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	took := time.Since(t0)
	if int(done.Load()) == r.n {
		// The same appends again at once: a tenant still running answers at an
		// append's cost; past MaxActive most were stopped again meanwhile and start
		// as after the restart (the bench reports both, to compare).
		t1 := time.Now()
		r.parallel(r.n, 16, func(i int) {
			r.appendOne(tenantID(i), r.tokens[i], fmt.Sprintf("%s again", tenantID(i)))
		})
		r.warm = time.Since(t1)
		progress("N=%d: the same appends to every tenant again at once: %s", r.n, r.warm.Round(time.Millisecond))
	}
	if u := r.unavailable.Load(); u != nil {
		progress("N=%d: the last 503: %s", r.n, u)
	}
	if int(done.Load()) < r.n {
		return 0, int(unavailable.Load()), fmt.Errorf("%d of %d tenants appended after the restart", done.Load(), r.n)
	}
	return took, int(unavailable.Load()), nil
}

// retry calls f until it succeeds, for at most a minute while the process does not
// answer (it is being restarted after an exit: svcProc's supervisor) or answers 503.
func (r *tenantsRun) retry(f func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil || r.ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		if msg := err.Error(); !strings.Contains(msg, "connection refused") && !strings.Contains(msg, ": 503 ") && !strings.Contains(msg, "unsupported protocol") {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// alternate runs the busy tenant rounds times on r and on peer in turn, the order
// turned each round, and returns a note with each round's p99s, their ratio (r over
// peer), the median ratio and the load average of each round.
func alternate(r, peer *tenantsRun, rounds int, d time.Duration) string {
	var ratios []float64
	var b strings.Builder
	for i := range rounds {
		var p99, floor time.Duration
		if i%2 == 0 {
			p99, _ = r.busyRun(d)
			floor, _ = peer.busyRun(d)
		} else {
			floor, _ = peer.busyRun(d)
			p99, _ = r.busyRun(d)
		}
		ratio := float64(p99) / float64(max(floor, time.Microsecond))
		ratios = append(ratios, ratio)
		load := loadAverage()
		progress("N=%d: round %d: busy p99 %s beside %d tenants, %s beside %d: %.2f×; load %s", r.n, i+1, p99.Round(100*time.Microsecond), r.n, floor.Round(100*time.Microsecond), peer.n, ratio, load)
		fmt.Fprintf(&b, " %.2f× (%s / %s, load %s);", ratio, p99.Round(100*time.Microsecond), floor.Round(100*time.Microsecond), load)
	}
	slices.Sort(ratios)
	return fmt.Sprintf(" busy p99 against a %d-tenant peer, %d rounds alternated: median %.2f×, min %.2f×, max %.2f×;%s", peer.n, rounds, ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], b.String())
}

// loadAverage is /proc/loadavg's one-minute figure ("?" if unknown).
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
