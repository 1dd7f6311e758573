package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Throttling of wrong attempts (SPEC.md: a handful from one address are throttled
// for a minute).
const (
	MaxFailures   = 5
	ThrottleFor   = time.Minute
	basicRealmHdr = `Basic realm="svc admin", charset="UTF-8"`
)

// DefaultThrottleTable is how many addresses the throttle tracks by default.
const DefaultThrottleTable = 100000

type throttle struct {
	mu    sync.Mutex
	size  int // addresses tracked at most
	fails map[string]*failures
}

type failures struct {
	n       int
	first   time.Time
	blocked time.Time // zero: not blocked
}

// blocked reports whether addr is throttled at now, and for how long.
func (t *throttle) blocked(addr string, now time.Time) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.fails[addr]
	if f == nil || f.blocked.IsZero() {
		return 0, false
	}
	if left := f.blocked.Add(ThrottleFor).Sub(now); left > 0 {
		return left, true
	}
	delete(t.fails, addr)
	return 0, false
}

// fail records a wrong attempt from addr. A full table makes room by dropping
// expired entries, then an address still counting; never an active block. When every
// entry is an active block, addr's attempt is not counted (and a warning says so).
func (t *throttle) fail(addr string, now time.Time) (tracked bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fails == nil {
		t.fails = map[string]*failures{}
	}
	if _, ok := t.fails[addr]; !ok && len(t.fails) >= max(t.size, 1) && !t.makeRoom(now) {
		return false
	}
	f := t.fails[addr]
	if f == nil || now.Sub(f.first) > ThrottleFor {
		f = &failures{first: now}
		t.fails[addr] = f
	}
	f.n++
	if f.n >= MaxFailures {
		f.blocked = now
	}
	return true
}

// makeRoom frees one entry or more of a full table: the expired ones, else one that
// is only counting. False when every entry is an active block.
func (t *throttle) makeRoom(now time.Time) bool {
	var counting string
	for a, f := range t.fails {
		switch {
		case f.blocked.IsZero() && now.Sub(f.first) > ThrottleFor, !f.blocked.IsZero() && now.Sub(f.blocked) >= ThrottleFor:
			delete(t.fails, a)
		case f.blocked.IsZero() && counting == "":
			counting = a
		}
	}
	if len(t.fails) < t.size {
		return true
	}
	if counting != "" {
		delete(t.fails, counting)
		return true
	}
	return false
}

// credentials returns the presented token and the actor it stands for: "bearer" for
// a bearer token, "<name> (<addr>)" for HTTP Basic.
func credentials(r *http.Request, addr string) (token, actor string) {
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(v), "bearer"
	}
	if user, pass, ok := r.BasicAuth(); ok {
		name := strings.TrimSpace(user)
		if name == "" {
			name = "admin"
		}
		if len(name) > 64 {
			name = name[:64]
		}
		return pass, name + " (" + addr + ")"
	}
	return "", ""
}

// tokenMatches compares token with the admin token by their SHA-256, in constant
// time.
func tokenMatches(token string, want [32]byte) bool {
	if token == "" {
		return false
	}
	h := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(h[:], want[:]) == 1
}
