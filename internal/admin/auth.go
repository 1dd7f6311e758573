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
	maxThrottled  = 100000
	basicRealmHdr = `Basic realm="svc admin", charset="UTF-8"`
)

type throttle struct {
	mu    sync.Mutex
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

// fail records a wrong attempt from addr.
func (t *throttle) fail(addr string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fails == nil || len(t.fails) >= maxThrottled {
		t.fails = map[string]*failures{}
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
