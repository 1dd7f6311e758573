package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"golang.org/x/sync/semaphore"

	"svc.dev/svc/httplimits"
	"svc.dev/svc/receipt"
)

// HTTPConfig configures the HTTP front end.
type HTTPConfig struct {
	Host        string
	Port        int // 0: any free port
	IdleMinutes int // a session without a request for this long is closed; default 30
	// Idle, when set, overrides IdleMinutes (finer than a minute: tests).
	Idle time.Duration
	// MaxConns caps the connections served at once (ServeHTTP); default 1024.
	MaxConns int
	// BodyReadTimeout is the time a client has to send one request body; default 30 s.
	BodyReadTimeout time.Duration
	// RequireProof refuses grants that name no agentKey: every request must then
	// carry a proof of possession (X-Svc-Proof, see HeaderProof). Grants that name
	// one need the proof either way.
	RequireProof bool
	// MaxBodyBytes caps the request bodies held in memory at once, all clients
	// together; each body reserves the 4 MiB cap while it is read. Default 256 MiB.
	MaxBodyBytes int64
	// AllowedOrigins are the browser origins (scheme://host[:port]) whose requests
	// are served besides the gateway's own (an Origin naming the Host the request was
	// sent to). A request with any other Origin header gets 403 before its grant is
	// read: a page in the user's browser must not drive the gateway (DNS rebinding,
	// cross-site requests). Requests without Origin (MCP clients outside a browser)
	// are not affected.
	AllowedOrigins []string

	noFastPath bool // tests: no tools/call fast path, every request to mcp-go
}

type ctxKey struct{}

// httpFront serves MCP Streamable HTTP on /mcp: one mcp-go server for every session,
// with a tool filter and handlers that find the session's grant in the context.
type httpFront struct {
	g    *Gateway
	mcp  *server.StreamableHTTPServer
	idle time.Duration // session idle time

	bodyTimeout time.Duration // HTTPConfig.BodyReadTimeout
	proofs      proofChecker
	bodyBytes   *semaphore.Weighted // request bodies held in memory, all clients together
	origins     []string            // HTTPConfig.AllowedOrigins

	sessions *httpSessions // by MCP session id; mcp-go's SessionIdManager
	noFast   bool          // tests: every request goes to mcp-go

	grants grantCache // sessionless clients present their grant on every request
}

// grantCache remembers grants whose signatures and chain were verified, by the SHA-256
// of the grant presented, so that a sessionless client's requests cost one map
// lookup instead of a parse and a signature check per link. The validity window is
// checked again at every use (Gateway.sessionFor). Bounded: when full it starts over.
type grantCache struct {
	mu sync.Mutex
	m  map[[32]byte]*verifiedGrant
}

// grantCacheSize bounds the cache; a gateway serves far fewer distinct grants.
const grantCacheSize = 4096

func (c *grantCache) get(key [32]byte) *verifiedGrant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

func (c *grantCache) put(key [32]byte, v *verifiedGrant) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= grantCacheSize {
		c.m = map[[32]byte]*verifiedGrant{}
	}
	c.m[key] = v
}

// maxGrantHeader caps the grant header: a chain of three grants is a few kilobytes.
const maxGrantHeader = 64 << 10

// Handler returns the gateway's HTTP handler (POST/GET/DELETE /mcp and GET /health).
func (g *Gateway) Handler(cfg HTTPConfig) http.Handler {
	if cfg.IdleMinutes <= 0 {
		cfg.IdleMinutes = 30
	}
	if cfg.Idle <= 0 {
		cfg.Idle = time.Duration(cfg.IdleMinutes) * time.Minute
	}
	if cfg.MaxBodyBytes < maxMCPBody {
		cfg.MaxBodyBytes = maxBodyBytes
	}
	if cfg.BodyReadTimeout <= 0 {
		cfg.BodyReadTimeout = 30 * time.Second
	}
	f := &httpFront{g: g, idle: cfg.Idle, bodyTimeout: cfg.BodyReadTimeout, proofs: proofChecker{require: cfg.RequireProof, now: g.now},
		bodyBytes: semaphore.NewWeighted(cfg.MaxBodyBytes), noFast: cfg.noFastPath, origins: cfg.AllowedOrigins}
	f.sessions = &httpSessions{idle: cfg.Idle, expire: f.expire, live: map[string]*httpSession{}, ended: map[string]struct{}{}}
	hooks := &server.Hooks{}
	hooks.AddAfterInitialize(func(ctx context.Context, _ any, _ *mcp.InitializeRequest, _ *mcp.InitializeResult) {
		s, _ := ctx.Value(ctxKey{}).(*Session)
		cs := server.ClientSessionFromContext(ctx)
		if s != nil && cs != nil && cs.SessionID() != "" {
			s.ID = cs.SessionID()
			f.sessions.add(s.ID, s)
		}
	})
	hooks.AddOnUnregisterSession(func(_ context.Context, cs server.ClientSession) {
		f.sessions.Terminate(cs.SessionID())
	})
	srv := g.agentServer(hooks, f.session)
	g.routes.watchNotes(f.sessions.tell) // for the gateway's life, as the handler
	// The session ids and their idle time are the gateway's (httpSessions): the
	// fast path answers without mcp-go, which would not see those requests.
	f.mcp = server.NewStreamableHTTPServer(srv,
		server.WithSessionIdManager(f.sessions),
		server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			if a := askerFrom(r.Context()); a != nil {
				ctx = context.WithValue(ctx, askerKey{}, a)
			}
			if s, ok := r.Context().Value(ctxKey{}).(*Session); ok {
				return context.WithValue(ctx, ctxKey{}, s)
			}
			return ctx
		}))
	mux := http.NewServeMux()
	mux.Handle("/mcp", f)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		n := f.sessions.count()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "sessions": n, "keyid": g.KeyID()})
	})
	return mux
}

// session finds the gateway session of a request: a stateful session by its MCP
// session id, or the grant checked on this very request.
func (f *httpFront) session(ctx context.Context) *Session {
	if cs := server.ClientSessionFromContext(ctx); cs != nil && cs.SessionID() != "" {
		if s := f.sessions.session(cs.SessionID()); s != nil {
			return s
		}
	}
	s, _ := ctx.Value(ctxKey{}).(*Session)
	return s
}

// ServeHTTP checks the grant on every request, before the body is read: the grant
// is the credential over HTTP, and a request that names a session must present the
// grant that session was opened under (a session id alone is not a credential), still
// inside its validity window. Then the body is read, capped at maxMCPBody (413 beyond)
// and under a read deadline, and handed to mcp-go. A rejected grant gets HTTP 403 with
// a JSON-RPC error; an unknown or closed session 404.
func (f *httpFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost, http.MethodGet, http.MethodDelete:
	default:
		w.Header().Set("Allow", "POST, GET, DELETE")
		http.Error(w, "/mcp takes POST, GET or DELETE", http.StatusMethodNotAllowed)
		return
	}
	if err := f.checkOrigin(r); err != nil {
		writeGrantRejection(w, err)
		return
	}
	v, key, err := f.presentedGrant(r)
	if err != nil {
		writeGrantRejection(w, err)
		return
	}
	s, hs, ok := f.requestSession(w, r, v, key)
	if !ok {
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, s))
	if hs != nil {
		r = r.WithContext(context.WithValue(r.Context(), askerKey{}, hs.asks))
	}
	rc := http.NewResponseController(w)
	if r.Method == http.MethodGet {
		// The session's event stream lives at most one idle period; the client opens
		// it again (SSE reconnects), presenting its grant again.
		_ = rc.SetWriteDeadline(time.Now().Add(f.idle))
	} else {
		_ = rc.SetWriteDeadline(time.Now().Add(callWriteTimeout))
	}
	// What can be refused without the body is refused before it is read.
	if v.agentKey != nil && r.Header.Get(HeaderProof) == "" {
		writeGrantRejection(w, errNoProof)
		return
	}
	if v.agentKey == nil && f.proofs.require {
		writeGrantRejection(w, f.proofs.check(r, v, nil))
		return
	}
	var body []byte
	if r.Method == http.MethodPost {
		var release func()
		if body, release, ok = f.readBody(w, r, rc); !ok {
			return
		}
		defer release()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if err := f.proofs.check(r, v, body); err != nil {
		writeGrantRejection(w, err)
		return
	}
	if hs != nil {
		// Only a request that passed every check keeps its session alive: a grant
		// travels in receipts, so a refused request (no proof of possession) must not.
		hs.touch()
	}
	if hs != nil && r.Method == http.MethodGet {
		f.serveEventStream(w, r, hs)
		return
	}
	if hs != nil && r.Method == http.MethodPost && hs.asks.answer(body) {
		w.WriteHeader(http.StatusAccepted) // the agent's answer to the gateway's request
		return
	}
	if hs != nil && r.Method == http.MethodPost && (f.g.serveToolsList(w, r, hs.s, body) || f.g.servePassThrough(w, r, hs.s, body)) {
		return
	}
	if hs != nil && r.Method == http.MethodPost && !f.noFast {
		if req, ok := f.g.httpFastCall(r, body); ok {
			f.g.serveFastCall(w, r, hs.s, &hs.calls, hs.asks, req)
			return
		}
		hs.calls.noteCancel(body)
	}
	f.mcp.ServeHTTP(w, r)
}

// requestSession finds the session a request names, which must have been opened under the
// grant it presents and still be inside the grant's window, or opens a new one under
// that grant (hs nil: not a live session of the registry). An unknown or terminated
// session gets 404 (textInvalidSession, textTerminatedSession). On false the refusal
// has been written.
func (f *httpFront) requestSession(w http.ResponseWriter, r *http.Request, v *verifiedGrant, key [32]byte) (*Session, *httpSession, bool) {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		s, err := f.g.sessionFor("", v)
		if err != nil {
			writeGrantRejection(w, fmt.Errorf("grant rejected: %w", err))
			return nil, nil, false
		}
		s.grantKey = key
		return s, nil, true
	}
	hs, missing := f.sessions.get(id)
	if hs == nil {
		http.Error(w, missing, http.StatusNotFound)
		return nil, nil, false
	}
	if hs.s.grantKey != key {
		writeGrantRejection(w, errors.New("grant rejected: this session was opened under another grant; present the session's own grant"))
		return nil, nil, false
	}
	if err := f.g.inWindow(hs.s.chain); err != nil {
		writeGrantRejection(w, fmt.Errorf("grant rejected: %w", err))
		return nil, nil, false
	}
	return hs.s, hs, true
}

// readBody reads a POST body, capped at maxMCPBody (413 beyond) and under a read
// deadline. Bodies in memory are bounded across all clients: a request reserves the
// cap before reading and keeps what its body takes until release is called, after it
// is answered. On false the refusal has been written.
func (f *httpFront) readBody(w http.ResponseWriter, r *http.Request, rc *http.ResponseController) ([]byte, func(), bool) {
	if !f.bodyBytes.TryAcquire(maxMCPBody) && !f.acquireBody(r.Context()) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the gateway is reading too many request bodies at once; retry shortly", http.StatusServiceUnavailable)
		return nil, nil, false
	}
	_ = rc.SetReadDeadline(time.Now().Add(f.bodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMCPBody))
	f.bodyBytes.Release(int64(maxMCPBody - len(body)))
	release := func() { f.bodyBytes.Release(int64(len(body))) }
	if err != nil {
		release()
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, fmt.Sprintf("request body larger than %d bytes", maxMCPBody), http.StatusRequestEntityTooLarge)
		} else {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		}
		return nil, nil, false
	}
	_ = rc.SetReadDeadline(time.Time{})
	return body, release, true
}

// acquireBody waits, at most the body read timeout, for room to read a body (the
// timer is made only when there is none at once).
func (f *httpFront) acquireBody(ctx context.Context) bool {
	actx, cancel := context.WithTimeout(ctx, f.bodyTimeout)
	defer cancel()
	return f.bodyBytes.Acquire(actx, maxMCPBody) == nil
}

// Per-request time bounds of /mcp (the server itself sets none for reads and writes,
// since a session's GET event stream is long-lived): a client has 30 s to
// send a request body (HTTPConfig.BodyReadTimeout); a POST or DELETE is answered within callWriteTimeout (a tool
// call, its fact lookups and the log's retried appends included); a GET stream is
// closed after the session's idle time.
const (
	callWriteTimeout = 5 * time.Minute
)

// presentedGrant decodes and verifies the grant of a request (signatures, trusted
// root, chain rules; not the window, which changes with time), with the SHA-256 of the
// decoded grant: a session remembers it and every later request must match it.
func (f *httpFront) presentedGrant(r *http.Request) (*verifiedGrant, [32]byte, error) {
	raw := r.Header.Get("X-Svc-Grant")
	if raw == "" {
		raw, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, [32]byte{}, fmt.Errorf("grant rejected: no grant presented (Authorization: Bearer <base64url grant> or X-Svc-Grant)")
	}
	if len(raw) > maxGrantHeader {
		return nil, [32]byte{}, fmt.Errorf("grant rejected: %d bytes, more than the %d a grant header may have", len(raw), maxGrantHeader)
	}
	data, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(raw, "="))
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("grant rejected: not base64url: %w", err)
	}
	key := sha256.Sum256(data) // one entry however the header pads or spells it
	v := f.grants.get(key)
	if v == nil {
		env, err := receipt.ParseEnvelope(data)
		if err != nil {
			return nil, key, fmt.Errorf("grant rejected: %w", err)
		}
		if v, err = f.g.verifyGrant(env); err != nil {
			return nil, key, fmt.Errorf("grant rejected: %w", err)
		}
		f.grants.put(key, v)
	}
	return v, key, nil
}

// serveEventStream serves a live session's standalone event stream (GET /mcp) here,
// not in mcp-go: the gateway sends on it only its own relayed requests
// (httpasks.go), and mcp-go's stream would
// read the session's notifications from the channel its calls' streams read too, so
// a call's relayed progress would be split between the two streams and reach the
// agent out of order. A server request within a call goes on the call's own stream
// either way (mcp-go scopes it to the POST). The stream stays open, a comment every
// 30 s, until the client goes, the session ends or the write deadline (the idle time)
// passes; the client then opens it again.
func (f *httpFront) serveEventStream(w http.ResponseWriter, r *http.Request, hs *httpSession) {
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		http.Error(w, "Not Acceptable: the client must accept text/event-stream", http.StatusNotAcceptable)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Mcp-Session-Id", hs.s.ID)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	hs.asks.open.Add(1)
	defer hs.asks.open.Add(-1)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-r.Context().Done():
			return
		case msg := <-hs.asks.events:
			if _, err := fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg); err != nil || rc.Flush() != nil {
				return
			}
			continue
		case <-tick.C:
		}
		if live, _ := f.sessions.get(hs.s.ID); live != hs {
			return // terminated or expired
		}
		if n%30 == 0 {
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// checkOrigin refuses a request whose Origin header names neither the gateway itself
// (the request's Host) nor one of HTTPConfig.AllowedOrigins.
func (f *httpFront) checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if u, err := url.Parse(origin); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host == r.Host {
		return nil
	}
	if slices.Contains(f.origins, origin) {
		return nil
	}
	return fmt.Errorf("origin refused: %q is not allowed to use this gateway (svc gateway --allow-origin %s adds it)", origin, origin)
}

func writeGrantRejection(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0",
		"error":   map[string]any{"code": -32000, "message": err.Error()},
		"id":      nil,
	})
}

// expire ends an idle session in mcp-go as a DELETE does (its SessionIdManager,
// httpSessions, terminates it; its transport state is dropped).
func (f *httpFront) expire(id string) {
	r, err := http.NewRequest(http.MethodDelete, "/mcp", nil)
	if err != nil {
		return
	}
	r.Header.Set(server.HeaderKeySessionID, id)
	f.mcp.ServeHTTP(&discardResponse{}, r)
}

// ServeHTTP listens and serves until ctx ends. ready, when set, gets the address.
func (g *Gateway) ServeHTTP(ctx context.Context, cfg HTTPConfig, ready func(addr string)) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		return fmt.Errorf("listen on %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	// Reads and writes are bounded per request by the /mcp front (bodyReadTimeout,
	// callWriteTimeout, the idle time for event streams), not by the server.
	lim := httplimits.Limits{Read: -1, Write: -1, MaxConns: cfg.MaxConns}
	hs := lim.Server(g.Handler(cfg))
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(lim.Listener(ln)) }()
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return hs.Shutdown(sctx)
	case err := <-errc:
		return err
	}
}
