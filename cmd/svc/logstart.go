package main

import (
	"net/http"
	"sync/atomic"

	"svc.dev/svc/httpjson"
)

// startGate is svc log's HTTP handler from the moment it listens: while the service
// starts (a cluster without quorum or electing a leader makes the start wait,
// logservice.Service.Retry) every request is answered 503 naming what the start
// waits for, /health included; then it hands every request to the service.
type startGate struct {
	live    atomic.Pointer[http.Handler]
	waiting atomic.Pointer[string] // what the start waits for; nil: nothing yet
}

// wait records what the start waits for (logservice.Config.Waiting).
func (g *startGate) wait(err error) {
	if err == nil {
		g.waiting.Store(nil)
		return
	}
	msg := err.Error()
	g.waiting.Store(&msg)
}

// serve hands every request from now on to h.
func (g *startGate) serve(h http.Handler) { g.live.Store(&h) }

func (g *startGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := g.live.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	msg := "log unavailable: starting"
	if m := g.waiting.Load(); m != nil {
		msg = "broker unavailable: starting: " + *m + "; retrying"
	}
	if r.URL.Path == "/health" {
		httpjson.WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"ok": false, "error": msg})
		return
	}
	httpjson.WriteError(w, http.StatusServiceUnavailable, msg)
}
