package portal

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxAddrs bounds the addresses a throttle remembers; past it, idle entries are
// dropped (a full limiter would allow its burst again anyway).
const maxAddrs = 100000

// throttle is a token bucket per client address: burst requests at once, then
// one per every.
type throttle struct {
	burst int
	every time.Duration
	mu    sync.Mutex
	addrs map[string]*entry
}

type entry struct {
	lim  *rate.Limiter
	last time.Time
}

func newThrottle(burst int, every time.Duration) *throttle {
	return &throttle{burst: burst, every: every, addrs: map[string]*entry{}}
}

// allow takes one token for addr at now; when none is left it returns false and
// how long until the next.
func (t *throttle) allow(addr string, now time.Time) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.addrs[addr]
	if e == nil {
		if len(t.addrs) >= maxAddrs {
			t.prune(now)
		}
		e = &entry{lim: rate.NewLimiter(rate.Every(t.every), t.burst)}
		t.addrs[addr] = e
	}
	e.last = now
	r := e.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// prune drops the entries whose buckets are full again.
func (t *throttle) prune(now time.Time) {
	full := time.Duration(t.burst) * t.every
	for a, e := range t.addrs {
		if now.Sub(e.last) > full {
			delete(t.addrs, a)
		}
	}
}
