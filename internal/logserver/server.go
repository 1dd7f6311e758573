package logserver

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"

	"svc.dev/svc/client"
	"svc.dev/svc/httpjson"
	"svc.dev/svc/httplimits"
	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// Limits of SPEC.md.
const (
	MaxAppendBody  = 64 << 10 // bytes; 413 beyond
	AppendRate     = 50       // appends a second per token
	AppendBurst    = 100
	MaxLeavesPage  = 10000
	DefaultTenant  = client.DefaultTenant
	maxAuditLimit  = 1000
	maxLimiterKeys = 100000
	// RecheckRate and RecheckBurst bound, per client address, how often a token the
	// folded view does not know may be checked against the broker (a token created a
	// moment ago on another process): a flood of wrong tokens costs no round trips
	// beyond them.
	RecheckRate  = 2 // a second
	RecheckBurst = 5
)

// Config configures a Server.
type Config struct {
	Tenants []*Tenant
	// Append sends appends to the sequencers; one attempt each (the HTTP client
	// retries), so construct it with pipeline.ClientConfig{Retries: -1}.
	Append *pipeline.Client
	// Checkpoints says whether checkpoints are published (/health reports it).
	Checkpoints bool
	// TrustProxy says which address per-address limits (admin throttling and the
	// broker checks of unknown tokens, in the database-backed server) count behind a
	// proxy. The zero value counts the peer: the header is client-forgeable. The
	// file-mode routes have no per-address limit.
	TrustProxy httplimits.Proxy
	Logger     *slog.Logger
	Now        func() time.Time
	// Telemetry counts refusals and traces appends (telemetry.Setup); nil: none.
	Telemetry *telemetry.Telemetry
	// Broker, when set, reports whether the process is connected to its broker; /health
	// answers 503 "broker unavailable: …" while it is not (the process retries, never
	// exits; svc_broker_retries_total counts the loops that failed).
	Broker func() error
	// Dynamic allows a server that starts with no tenants and gets them from
	// AddTenant (the database-backed server, whose tenants come from SVC_ADMIN).
	Dynamic bool
	// Lookup, when set, is asked about a tenant id the server does not serve (yet):
	// it returns once the tenant is served, or false when there is none; an error
	// (the tenant exists but could not be started: a broker limit, a full disk) is
	// answered 503 to that request alone. The database-backed server waits there for
	// its view to apply a creation another process just made, and starts an idle
	// tenant there.
	Lookup func(ctx context.Context, id string) (bool, error)
	// Authorize, when set (a server whose tenants start on demand: the
	// database-backed server), decides whether a bearer token is one of tenant id's
	// before the tenant is looked up, started or touched, on every route that needs a
	// token (append, /add, leaves, usage, audit, entry bundles): a missing, wrong or other
	// tenant's token is 401 and never starts a tenant nor keeps one active. mayAsk is
	// the request's address's budget of broker rechecks, as for Tenant.Authorize.
	Authorize func(id, token string, mayAsk func() bool) bool
	// PublicEntries, when set with Authorize, says whether tenant id opted its log
	// public (its entry bundles need no token), known without starting the tenant;
	// nil: no tenant's entry bundles are public before it starts.
	PublicEntries func(id string) bool
	// Touch, when set, is told of every request to a tenant the server serves: the
	// database-backed server keeps a tenant active while it is used.
	Touch func(id string)
	// Signer is what /health checks when no tenant is served yet (the
	// database-backed server starts its tenants on their first request).
	Signer receipt.EnvelopeSigner
	// Problems, when set, lists tenants that cannot be served now, with why; /health
	// reports them (the process itself stays up and serves the others).
	Problems func() map[string]string
	// Alarm, when set, is asked by /health: a non-nil error (a sequencer that stopped
	// appending because the log of record lost leaves) answers 503 with it.
	Alarm func() error
}

// Server serves the log's HTTP routes.
type Server struct {
	cfg     Config
	tmu     sync.RWMutex
	tenants map[string]*Tenant
	mux     *http.ServeMux
	log     *slog.Logger

	limMu    sync.Mutex
	limiters map[string]*rate.Limiter
}

// New checks cfg and builds the routes.
func New(cfg Config) (*Server, error) {
	if cfg.Append == nil {
		return nil, errors.New("logserver: no append client")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, tenants: map[string]*Tenant{}, mux: http.NewServeMux(), log: cfg.Logger, limiters: map[string]*rate.Limiter{}}
	for _, t := range cfg.Tenants {
		if err := t.check(); err != nil {
			return nil, fmt.Errorf("logserver: %w", err)
		}
		if _, dup := s.tenants[t.ID]; dup {
			return nil, fmt.Errorf("logserver: tenant %s configured twice", t.ID)
		}
		s.tenants[t.ID] = t
	}
	if len(s.tenants) == 0 && !cfg.Dynamic {
		return nil, errors.New("logserver: no tenants")
	}
	s.mux.HandleFunc("GET /health", s.health)
	for _, r := range []struct {
		method, path string
		h            func(http.ResponseWriter, *http.Request, *Tenant)
		token        bool // needs the tenant's token: checked before the tenant is looked up
	}{
		{"GET", "/.well-known/svc-log.json", s.keys, false},
		{"GET", "/head", s.head, false},
		{"GET", "/root", s.root, false},
		{"GET", "/consistency", s.consistency, false},
		{"GET", "/checkpoints", s.checkpoints, false},
		{"GET", "/checkpoint", s.checkpointNote, false},
		{"POST", "/append", s.append, true},
		{"POST", "/add", s.add, true}, // Tessera's write route (add.go)
		{"GET", "/leaves", s.tenantOnly(s.leaves), true},
		{"GET", "/usage", s.tenantOnly(s.usage), true},
		{"GET", "/audit", s.tenantOnly(s.audit), true},
	} {
		s.mux.HandleFunc(r.method+" "+r.path, s.tenantRoute(r.h, r.token))
		s.mux.HandleFunc(r.method+" /t/{tenant}"+r.path, s.tenantRoute(r.h, r.token))
	}
	s.tileRoutes() // C2SP tlog-tiles (tiles.go)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpjson.WriteError(w, http.StatusNotFound, "no such route: "+r.Method+" "+r.URL.Path)
	})
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// tenantRoute serves h with the request's tenant, looked up (and started) if need
// be. For a route that needs the tenant's token (needsToken), with Config.Authorize,
// the token is checked before the tenant is looked up, started or touched (h checks it
// again against the tenant, from the view: no second round trip).
func (s *Server) tenantRoute(h func(http.ResponseWriter, *http.Request, *Tenant), needsToken bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("tenant")
		if id == "" {
			id = DefaultTenant
		}
		if needsToken && s.cfg.Authorize != nil && !s.cfg.Authorize(id, bearer(r), s.mayAsk(r)) {
			s.cfg.Telemetry.Refused(telemetry.ReasonUnauthorized)
			httpjson.WriteError(w, http.StatusUnauthorized, "unauthorized")
			return
		}
		t, ok := s.tenant(id)
		if !ok && s.cfg.Lookup != nil {
			found, err := s.cfg.Lookup(r.Context(), id)
			if err != nil {
				s.unavailable(w, r, fmt.Errorf("tenant %s: %w", id, err))
				return
			}
			if found {
				t, ok = s.tenant(id)
			}
		}
		if ok && s.cfg.Touch != nil {
			s.cfg.Touch(id)
		}
		if !ok {
			httpjson.WriteError(w, http.StatusNotFound, fmt.Sprintf("%s: tenant %q", errNoTenant, id))
			return
		}
		h(w, r, t)
	}
}

// tenantOnly guards the tenant routes: a bearer token of this tenant is required.
func (s *Server) tenantOnly(h func(http.ResponseWriter, *http.Request, *Tenant)) func(http.ResponseWriter, *http.Request, *Tenant) {
	return func(w http.ResponseWriter, r *http.Request, t *Tenant) {
		if !s.authorized(t, r, bearer(r)) {
			httpjson.WriteError(w, http.StatusUnauthorized, "unauthorized")
			return
		}
		h(w, r, t)
	}
}

func bearer(r *http.Request) string {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(v)
}

func (s *Server) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Warn("log unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
	httpjson.WriteError(w, http.StatusServiceUnavailable, "log unavailable: "+err.Error())
}

// AddTenant serves t from now on, replacing a tenant of the same id (a front end
// that took over a tenant's sequencer swaps its read-only tree for the sequencer's).
func (s *Server) AddTenant(t *Tenant) error {
	if err := t.check(); err != nil {
		return fmt.Errorf("logserver: %w", err)
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	s.tenants[t.ID] = t
	return nil
}

// RemoveTenant stops serving tenant id from this server's map: the next request for
// it goes to Lookup (the database-backed server stops an idle tenant this way).
func (s *Server) RemoveTenant(id string) {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	delete(s.tenants, id)
}

func (s *Server) tenant(id string) (*Tenant, bool) {
	s.tmu.RLock()
	defer s.tmu.RUnlock()
	t, ok := s.tenants[id]
	return t, ok
}

// healthLog names the head /health has signed when no tenant is served yet (of the
// empty tree): the signer service signs only heads that name their log, and no tenant
// can have this one (tenant ids have no parentheses; an operator's log id may not
// start with receipt.DefaultLogIDPrefix).
const healthLog = receipt.DefaultLogIDPrefix + "(health)"

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Alarm != nil {
		if err := s.cfg.Alarm(); err != nil {
			httpjson.WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"ok": false, "error": err.Error()})
			return
		}
	}
	t, ok := s.tenant(DefaultTenant)
	if !ok {
		s.tmu.RLock()
		for _, t = range s.tenants {
			break
		}
		s.tmu.RUnlock()
	}
	sig, logID, size, root := s.cfg.Signer, healthLog, uint64(0), merkle.EmptyRoot
	if t != nil {
		var err error
		sig, logID, size = t.Signer, t.LogID, t.Tree.Size()
		if root, err = t.Tree.RootAt(size); err != nil {
			httpjson.WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"ok": false, "error": "log unavailable: " + err.Error()})
			return
		}
	}
	if sig == nil {
		httpjson.WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"ok": false, "error": "log unavailable: no tenant yet"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if s.cfg.Broker != nil {
		if err := s.cfg.Broker(); err != nil {
			httpjson.WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"ok": false, "error": "broker unavailable: " + err.Error()})
			return
		}
	}
	// The signer answers when it signs the current head (of the empty tree when no
	// tenant is served yet).
	var err error
	if t != nil {
		_, _, err = receipt.SignHead(ctx, t.Signer, t.Tree, t.ID, t.LogID, s.cfg.Now())
	} else {
		_, err = receipt.SignTreeHeadWith(ctx, sig, size, root.String(), s.cfg.Now(), logID)
	}
	if err != nil {
		httpjson.WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"ok": false, "error": "signer unavailable: " + err.Error()})
		return
	}
	out := map[string]any{"ok": true, "keyid": sig.KeyID(), "checkpoints": s.cfg.Checkpoints}
	if s.cfg.Problems != nil {
		if p := s.cfg.Problems(); len(p) > 0 {
			out["tenantsUnavailable"] = p
		}
	}
	httpjson.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) keys(w http.ResponseWriter, r *http.Request, t *Tenant) {
	doc, err := t.Keys(r.Context())
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	out := *doc
	if t.LogID != "" {
		out.Log = t.LogID
	}
	httpjson.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) head(w http.ResponseWriter, r *http.Request, t *Tenant) {
	env, _, err := receipt.SignHead(r.Context(), t.Signer, t.Tree, t.ID, t.LogID, s.cfg.Now())
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"treeHead": env})
}

// uintParam reads an optional non-negative integer query parameter.
func uintParam(r *http.Request, name string, def uint64) (uint64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("query %s=%q is not a non-negative integer", name, v)
	}
	return n, nil
}

func (s *Server) root(w http.ResponseWriter, r *http.Request, t *Tenant) {
	cur := t.Tree.Size()
	size, err := uintParam(r, "size", cur)
	if err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if size > cur {
		httpjson.WriteError(w, http.StatusBadRequest, fmt.Sprintf("size %d is outside 0..%d (the current size)", size, cur))
		return
	}
	root, err := t.Tree.RootAt(size)
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"treeSize": size, "rootHash": root.String()})
}

func (s *Server) consistency(w http.ResponseWriter, r *http.Request, t *Tenant) {
	cur := t.Tree.Size()
	if r.URL.Query().Get("old") == "" {
		httpjson.WriteError(w, http.StatusBadRequest, "query old is required: /consistency?old=M&new=N")
		return
	}
	oldSize, err := uintParam(r, "old", 0)
	if err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	newSize, err := uintParam(r, "new", cur)
	if err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if oldSize > newSize || newSize > cur {
		httpjson.WriteError(w, http.StatusBadRequest, fmt.Sprintf("want 0 <= old <= new <= %d (the current size); got old=%d new=%d", cur, oldSize, newSize))
		return
	}
	proof, err := t.Tree.ConsistencyProof(oldSize, newSize)
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"oldSize": oldSize, "newSize": newSize, "hashes": receipt.HashStrings(proof)})
}

func (s *Server) checkpoints(w http.ResponseWriter, r *http.Request, t *Tenant) {
	since, err := uintParam(r, "since", 0)
	if err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	cps := []Checkpoint{}
	if t.Checkpoints != nil {
		if cps, err = t.Checkpoints(since); err != nil {
			s.unavailable(w, r, err)
			return
		}
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"checkpoints": cps})
}

// checkpointNote serves the latest checkpoint in C2SP signed-note form (tlog-tiles'
// /checkpoint), cosignatures included.
func (s *Server) checkpointNote(w http.ResponseWriter, r *http.Request, t *Tenant) {
	if t.CheckpointNote == nil {
		httpjson.WriteError(w, http.StatusNotFound, "this log publishes no signed-note checkpoints")
		return
	}
	data, err := t.CheckpointNote()
	if errors.Is(err, fs.ErrNotExist) {
		httpjson.WriteError(w, http.StatusNotFound, "no checkpoint published yet")
		return
	}
	if err != nil { // the store does not answer
		s.unavailable(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(data)
}

// appendRequest is the body of POST /append: exactly one of leaf and leafHash.
type appendRequest struct {
	Leaf     *string `json:"leaf"`
	LeafHash *string `json:"leafHash"`
}

// ParseAppendBody validates an append body and returns the leaf to append.
func ParseAppendBody(body []byte) (pipeline.Leaf, error) {
	// Fast path: {"leaf":"..."} whose string needs no unescaping, which is what a
	// canonical envelope in a compact body looks like.
	if rest, ok := bytes.CutPrefix(body, []byte(`{"leaf":"`)); ok {
		if leaf, ok := bytes.CutSuffix(bytes.TrimRight(rest, " \t\r\n"), []byte(`"}`)); ok && len(leaf) > 0 &&
			bytes.IndexByte(leaf, '"') < 0 && bytes.IndexByte(leaf, '\\') < 0 && !hasControl(leaf) && utf8.Valid(leaf) {
			return pipeline.NewLeaf(bytes.Clone(leaf)), nil
		}
	}
	req, err := decodeAppendBody(body)
	if err != nil {
		return pipeline.Leaf{}, err
	}
	switch {
	case req.Leaf != nil && req.LeafHash != nil:
		return pipeline.Leaf{}, errors.New("give leaf or leafHash, not both")
	case req.Leaf != nil:
		if *req.Leaf == "" {
			return pipeline.Leaf{}, errors.New("leaf is empty")
		}
		return pipeline.NewLeaf([]byte(*req.Leaf)), nil
	case req.LeafHash != nil:
		h, err := merkle.ParseHash(*req.LeafHash)
		if err != nil {
			return pipeline.Leaf{}, fmt.Errorf("leafHash: want 64 hex characters: %w", err)
		}
		return pipeline.Leaf{Hash: h}, nil
	}
	return pipeline.Leaf{}, errors.New("body names neither leaf nor leafHash")
}

// decodeAppendBody reads the append body strictly: one JSON object whose keys are
// exactly "leaf" or "leafHash" (case-sensitive, each at most once; encoding/json would
// take "LEAF" for leaf and let a repeated key win), string values of valid UTF-8
// (encoding/json would turn invalid bytes or a lone surrogate escape into U+FFFD, and
// the log would then hold a leaf the client never sent), nothing after it.
func decodeAppendBody(body []byte) (appendRequest, error) {
	var req appendRequest
	shape := `want {"leaf": "<canonical receipt envelope>"} or {"leafHash": "<64 hex>"}`
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return req, fmt.Errorf("body is not {\"leaf\": ...} or {\"leafHash\": ...}: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return req, fmt.Errorf("body is not a JSON object; %s", shape)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return req, fmt.Errorf("body is not {\"leaf\": ...} or {\"leafHash\": ...}: %w", err)
		}
		key, _ := tok.(string)
		var dst **string
		switch {
		case key == "leaf":
			dst = &req.Leaf
		case key == "leafHash":
			dst = &req.LeafHash
		case strings.EqualFold(key, "leaf") || strings.EqualFold(key, "leafHash"):
			return req, fmt.Errorf("unknown field %q: keys are case-sensitive; %s", key, shape)
		default:
			return req, fmt.Errorf("unknown field %q; %s", key, shape)
		}
		if *dst != nil {
			return req, fmt.Errorf("field %q appears more than once; give it once", key)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return req, fmt.Errorf("body is not {\"leaf\": ...} or {\"leafHash\": ...}: %w", err)
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return req, fmt.Errorf("%s: want a JSON string", key)
		}
		if !utf8.Valid(raw) {
			return req, fmt.Errorf("%s is not valid UTF-8: send the canonical envelope's exact UTF-8 text", key)
		}
		if strings.ContainsRune(v, utf8.RuneError) && !bytes.Contains(raw, []byte("\uFFFD")) && !bytes.Contains(raw, []byte("\ufffd")) && !bytes.Contains(raw, []byte(string(utf8.RuneError))) {
			return req, fmt.Errorf("%s is not valid UTF-8: it escapes a lone surrogate (\\uD800-\\uDFFF without its pair)", key)
		}
		*dst = &v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return req, fmt.Errorf("body is not {\"leaf\": ...} or {\"leafHash\": ...}: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, errors.New("trailing data after the JSON body")
	}
	return req, nil
}

func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

func (s *Server) append(w http.ResponseWriter, r *http.Request, t *Tenant) {
	token, body, ok := s.writeBody(w, r, t, MaxAppendBody, "append body")
	if !ok {
		return
	}
	leaf, err := ParseAppendBody(body)
	if err != nil {
		s.cfg.Telemetry.Refused(telemetry.ReasonInvalid)
		httpjson.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.allow(w, token) {
		return
	}
	proof, ok := s.commit(w, r, t, leaf, "append")
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(proof))) // not chunked past 2 KB
	_, _ = w.Write(proof)                                      // the sequencer's answer: {inclusion, treeHead}
}

// writeBody checks the tenant's token before anything is read, then reads the body,
// at most limit bytes (413 beyond; what names it in the error). ok is false when an
// answer was written.
func (s *Server) writeBody(w http.ResponseWriter, r *http.Request, t *Tenant, limit int64, what string) (token string, body []byte, ok bool) {
	token = bearer(r)
	if t.tokenRequired() && !s.authorized(t, r, token) {
		s.cfg.Telemetry.Refused(telemetry.ReasonUnauthorized)
		httpjson.WriteError(w, http.StatusUnauthorized, "unauthorized")
		return "", nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.cfg.Telemetry.Refused(telemetry.ReasonTooLarge)
			httpjson.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s over %d bytes", what, limit))
			return "", nil, false
		}
		httpjson.WriteError(w, http.StatusBadRequest, "reading body: "+err.Error())
		return "", nil, false
	}
	return token, body, true
}

// allow applies SPEC.md's per-token append rate (429 with Retry-After: 1); a log that
// takes appends without a token has chosen to be open, and is not limited here.
func (s *Server) allow(w http.ResponseWriter, token string) bool {
	if token == "" {
		return true
	}
	h := HashToken(token)
	if !s.limiter(hex.EncodeToString(h[:8])).Allow() {
		s.cfg.Telemetry.Refused(telemetry.ReasonTokenRate)
		w.Header().Set("Retry-After", "1")
		httpjson.WriteError(w, http.StatusTooManyRequests, "too many appends; retry shortly")
		return false
	}
	return true
}

// commit hands leaf to the tenant's sequencer and returns its answer
// ({inclusion, treeHead}); a refusal is answered with its status (refusalStatus).
func (s *Server) commit(w http.ResponseWriter, r *http.Request, t *Tenant, leaf pipeline.Leaf, what string) ([]byte, bool) {
	ctx, end := s.cfg.Telemetry.Publish(r.Context(), t.ID)
	proof, err := s.cfg.Append.DoRaw(ctx, t.ID, leaf)
	end(err)
	if err == nil {
		return proof, true
	}
	ref := pipeline.AsRefusal(err)
	s.cfg.Telemetry.Refused(telemetry.ReasonOf(ref))
	status := refusalStatus(ref)
	if ref.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(ref.RetryAfter))
	}
	if status >= 500 {
		s.log.Warn(what+" failed", "tenant", t.ID, "status", status, "err", ref.Message)
	}
	httpjson.WriteError(w, status, ref.Message)
	return nil, false
}

func (s *Server) limiter(key string) *rate.Limiter { return s.limiterOf(key, AppendRate, AppendBurst) }

// limiterOf is key's token bucket (made with r and burst on first use).
func (s *Server) limiterOf(key string, r rate.Limit, burst int) *rate.Limiter {
	s.limMu.Lock()
	defer s.limMu.Unlock()
	l, ok := s.limiters[key]
	if !ok {
		if len(s.limiters) >= maxLimiterKeys {
			s.limiters = map[string]*rate.Limiter{} // forget idle keys rather than grow without bound
		}
		l = rate.NewLimiter(r, burst)
		s.limiters[key] = l
	}
	return l
}

// authorized reports whether r's bearer token is one of t's; a token t does not
// know may be rechecked (Tenant.Authorize) within r's address's budget.
func (s *Server) authorized(t *Tenant, r *http.Request, token string) bool {
	return t.authorized(token, s.mayAsk(r))
}

// AllowAddr spends one request of r's client address's budget named kind (rate
// requests a second, burst at once; the address under Config.TrustProxy, as every
// per-address limit counts it). Over budget it answers 429 with Retry-After: 1 and
// returns false. Routes served beside the tenants' whose requests cost the database
// (the log of logs') take their requests through it.
func (s *Server) AllowAddr(w http.ResponseWriter, r *http.Request, kind string, rt rate.Limit, burst int) bool {
	if s.limiterOf(kind+" "+httplimits.ClientAddr(r, s.cfg.TrustProxy), rt, burst).Allow() {
		return true
	}
	w.Header().Set("Retry-After", "1")
	httpjson.WriteError(w, http.StatusTooManyRequests, "too many requests from this address; retry shortly")
	return false
}

// mayAsk is r's address's budget of broker rechecks of tokens the view does not know.
func (s *Server) mayAsk(r *http.Request) func() bool {
	return func() bool {
		return s.limiterOf("recheck "+httplimits.ClientAddr(r, s.cfg.TrustProxy), RecheckRate, RecheckBurst).Allow()
	}
}

func (s *Server) leaves(w http.ResponseWriter, r *http.Request, t *Tenant) {
	size := t.Tree.Size()
	since, err := uintParam(r, "since", 0)
	if err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit, err := uintParam(r, "limit", MaxLeavesPage)
	if err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit = min(limit, MaxLeavesPage)
	if since > size {
		httpjson.WriteError(w, http.StatusBadRequest, fmt.Sprintf("since %d is beyond the current size %d", since, size))
		return
	}
	end := min(since+limit, size)
	out := make([]string, 0, end-since)
	for i := since; i < end; i++ {
		h, err := t.Tree.LeafHash(i)
		if err != nil {
			s.unavailable(w, r, err)
			return
		}
		out = append(out, h.String())
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"since": since, "size": size, "leaves": out})
}

func (s *Server) usage(w http.ResponseWriter, r *http.Request, t *Tenant) {
	month := r.URL.Query().Get("month")
	if month == "" {
		month = s.cfg.Now().UTC().Format("2006-01")
	}
	if _, err := time.Parse("2006-01", month); err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, fmt.Sprintf("month %q: want YYYY-MM", month))
		return
	}
	if t.Usage == nil {
		httpjson.WriteError(w, http.StatusNotFound, "metering is not configured for this log")
		return
	}
	u, err := t.Usage(month)
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, u)
}

func (s *Server) audit(w http.ResponseWriter, r *http.Request, t *Tenant) {
	limit, err := uintParam(r, "limit", 100)
	if err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	entries := []client.AuditEntry{}
	if t.Audit != nil {
		if entries, err = t.Audit(int(min(limit, maxAuditLimit))); err != nil {
			s.unavailable(w, r, err)
			return
		}
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"entries": entries})
}

// HandleFunc serves pattern with h beside the log's routes (the hosted log's log of
// logs). h checks its own credentials; the log's are not asked.
func (s *Server) HandleFunc(pattern string, h http.HandlerFunc) { s.mux.HandleFunc(pattern, h) }
