package gateway

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// httpSessions is the HTTP front's registry of sessions, by MCP session id, and
// mcp-go's server.SessionIdManager: mcp-go mints the id of a session it initializes
// here (Generate), asks here whether a session is live (Validate) and ends it here
// (Terminate, on DELETE). The gateway owns it so that its tools/call fast path, which
// answers without mcp-go, knows which sessions are live, terminated or unknown, and
// keeps them alive: the idle time (--idle-minutes) is the gateway's too, each request
// naming a session and passing the front's checks touching it, since mcp-go's idle bookkeeping is unexported and
// would close a session whose calls all took the fast path.
type httpSessions struct {
	idle   time.Duration
	expire func(id string) // ends an idle session in mcp-go (whose DELETE calls Terminate)

	mu    sync.Mutex
	live  map[string]*httpSession
	ended map[string]struct{} // terminated ids, to answer as mcp-go would; bounded
}

// httpSession is one live session: the gateway session it was opened under, when it
// was last used, and the fast path's calls in flight on it.
type httpSession struct {
	s     *Session
	last  atomic.Int64 // unix nanoseconds of the last request naming it
	timer *time.Timer  // fires when the session may have been idle for the idle time
	calls inflightCalls
	asks  *agentAsks // the front's own requests to the agent (httpasks.go)
}

// maxEndedSessions bounds the terminated ids remembered; beyond, the memory starts
// over and an old id reads as unknown (404 either way).
const maxEndedSessions = 65536

// The answers to a request naming a session the registry does not know, or knows as
// terminated: HTTP 404, text, in the words of mcp-go's Streamable HTTP server
// (handlePost), then what to do next.
const (
	textInvalidSession    = "Invalid session ID: no open session has this id; initialize a new session with a grant"
	textTerminatedSession = "Session terminated: it was closed (DELETE or --idle-minutes); initialize a new session with a grant"
)

// idPrefix is the prefix of mcp-go's session ids, kept so ids read as before.
const idPrefix = "mcp-session-"

// Generate mints a session id for an initialize request; the session is live once
// initialized (add).
func (r *httpSessions) Generate() string { return idPrefix + uuid.NewString() }

// Validate reports whether id names a live session (nil), a terminated one (true) or
// none (an error), as mcp-go's stateful manager does.
func (r *httpSessions) Validate(id string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live[id] != nil {
		return false, nil
	}
	if _, ok := r.ended[id]; ok {
		return true, nil
	}
	return false, fmt.Errorf("session not found: %s", id)
}

// Terminate ends a session (DELETE, idle time); ending one twice or an unknown one
// is not an error.
func (r *httpSessions) Terminate(id string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hs := r.live[id]; hs != nil {
		hs.timer.Stop()
		delete(r.live, id)
		if len(r.ended) >= maxEndedSessions {
			r.ended = map[string]struct{}{}
		}
		r.ended[id] = struct{}{}
	}
	return false, nil
}

// add makes an initialized session live under its id.
func (r *httpSessions) add(id string, s *Session) {
	hs := &httpSession{s: s, asks: newAgentAsks()}
	hs.last.Store(time.Now().UnixNano())
	r.mu.Lock()
	defer r.mu.Unlock()
	hs.timer = time.AfterFunc(r.idle, func() { r.checkIdle(id, hs) })
	r.live[id] = hs
}

// get is the live session id names; nil when none, with the text mcp-go answers such
// a request with.
func (r *httpSessions) get(id string) (*httpSession, string) {
	r.mu.Lock()
	hs := r.live[id]
	_, ended := r.ended[id]
	r.mu.Unlock()
	switch {
	case hs != nil:
		return hs, ""
	case ended:
		return nil, textTerminatedSession
	}
	return nil, textInvalidSession
}

// touch starts the session's idle time again: a request named it and passed every
// check of the front (the session's grant, its window, the proof of possession).
func (hs *httpSession) touch() { hs.last.Store(time.Now().UnixNano()) }

// session is the gateway session of a live id, untouched; nil when none.
func (r *httpSessions) session(id string) *Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hs := r.live[id]; hs != nil {
		return hs.s
	}
	return nil
}

// tell sends n to each live session it is for, on its standalone stream when one is
// open (a stream's queue full: dropped, as an agent without a stream misses it; its
// next tools/list is current either way).
func (r *httpSessions) tell(n note) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, hs := range r.live {
		if hs.asks == nil || hs.asks.open.Load() == 0 || !n.to(hs.s) {
			continue
		}
		select {
		case hs.asks.events <- bytes.TrimSuffix(n.line, []byte("\n")):
		default:
		}
	}
}

func (r *httpSessions) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

// checkIdle ends a session unused for the idle time, or waits for the rest of it.
func (r *httpSessions) checkIdle(id string, hs *httpSession) {
	if rest := r.idle - time.Since(time.Unix(0, hs.last.Load())); rest > 0 {
		r.mu.Lock()
		if r.live[id] == hs {
			hs.timer.Reset(rest)
		}
		r.mu.Unlock()
		return
	}
	r.expire(id)
	r.Terminate(id) // in case mcp-go did not know it
}

// discardResponse is the response writer of the gateway's own requests to mcp-go
// (ending an idle session), whose answers nobody reads.
type discardResponse struct{ h http.Header }

func (d *discardResponse) Header() http.Header {
	if d.h == nil {
		d.h = http.Header{}
	}
	return d.h
}
func (d *discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardResponse) WriteHeader(int)             {}
