package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"svc.dev/svc/httplimits"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Limits of the signer service.
const (
	// MaxSignBody caps a POST /sign body (413 beyond). A tree head is a few hundred bytes.
	MaxSignBody = 1 << 20
	// MinTokenLength is the shortest shared token NewServer accepts.
	MinTokenLength = 16
	// DefaultTimeout bounds each client request (SPEC.md: outbound fetches time out at
	// ten seconds).
	DefaultTimeout = 10 * time.Second
	// ShutdownTimeout bounds the graceful shutdown of Serve.
	ShutdownTimeout = 10 * time.Second
)

// SignRequest is the body of POST /sign. Payload travels as standard base64, as in a
// DSSE envelope.
type SignRequest struct {
	PayloadType string         `json:"payloadType"`
	Payload     receipt.Base64 `json:"payload"`
	// Tenant is the tenant the log server signs the head for, logged only: the signer
	// keeps its state under the head's "log" (the name the signature covers), never
	// under what a log server says beside the head. Optional.
	Tenant string `json:"tenant,omitempty"`
	// Consistency proves that the head extends the last one the signer signed for its
	// log. Needed whenever the head is larger than that one; a signer answers 409 with
	// the head it needs a proof from (Conflict) otherwise.
	Consistency *Consistency `json:"consistency,omitempty"`
}

// Consistency is an RFC 6962 consistency proof from an older size of the log to the
// head being signed: hashes in lowercase hex, listed from the bottom upwards.
type Consistency struct {
	FromSize uint64   `json:"fromSize"`
	Proof    []string `json:"proof"`
}

// MaxProofHashes caps a consistency proof (a proof between sizes under 2^64 has at
// most 2*64 hashes).
const MaxProofHashes = 128

// Conflict is the body of a 409 answer to POST /sign: why the head was refused and the
// last head the signer signed for that log, which the next head must extend.
type Conflict struct {
	Error string     `json:"error"`
	Last  SignedHead `json:"last"`
}

// Health is the body of GET /health.
type Health struct {
	OK    bool   `json:"ok"`
	KeyID string `json:"keyid"`
}

// RetiredKey is a public key the log used before its current one, published so the
// heads it signed keep verifying.
type RetiredKey struct {
	Key       signer.PublicKey
	ValidFrom time.Time
	ValidTo   time.Time
}

// LoadRetiredKey reads a .pub file as a retired key. A .pub file carries no dates, so
// validFrom is the file's modification time and validTo is the given time (the current
// key's validFrom); if the file is not older than validTo, validFrom is set one
// millisecond before validTo, so the entry stays well formed.
func LoadRetiredKey(path string, validTo time.Time) (RetiredKey, error) {
	pub, err := signer.LoadPublicKey(path)
	if err != nil {
		return RetiredKey{}, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return RetiredKey{}, err
	}
	// Key documents carry milliseconds and need validFrom strictly before validTo.
	validTo = validTo.Truncate(time.Millisecond)
	from := st.ModTime().Truncate(time.Millisecond)
	if !from.Before(validTo) {
		from = validTo.Add(-time.Millisecond)
	}
	return RetiredKey{Key: pub, ValidFrom: from, ValidTo: validTo}, nil
}

// ServerConfig configures a Server.
type ServerConfig struct {
	Key       *signer.Key  // the log's private key; required
	Token     string       // the shared bearer token; required, kept only as its SHA-256
	ValidFrom time.Time    // when Key became the current key; required
	Retired   []RetiredKey // published after the current key, in this order
	LogID     string       // the key document's "log" when set
	Logger    *slog.Logger // one line per request; default slog.Default()
	// Heads remembers the last head signed per log (OpenHeadStore); required. The
	// signer signs a head only if it extends that one.
	Heads *HeadStore
	// Now is the signer host's clock, sent as the Date header of every answer (the
	// log's client refuses a signer whose clock disagrees with its own by more than
	// its tolerance, see Client); default time.Now. The fault suite (internal/faults)
	// sets a skewed clock here to play a signer host whose clock is wrong.
	Now func() time.Time
}

// Server is the signer service's http.Handler. It is safe for concurrent use.
type Server struct {
	key       *signer.Key
	keyIDs    []string // the current key's, then the retired keys', in order
	heads     *HeadStore
	tokenHash [sha256.Size]byte
	keysJSON  []byte
	health    []byte
	log       *slog.Logger
	now       func() time.Time
}

// NewServer checks cfg and builds the server.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Key == nil {
		return nil, errors.New("signer: no signing key")
	}
	if err := CheckToken(cfg.Token); err != nil {
		return nil, err
	}
	if cfg.ValidFrom.IsZero() {
		return nil, errors.New("signer: the current key's validFrom is not set")
	}
	if cfg.Heads == nil {
		return nil, errors.New("signer: no head store (the last head signed for each log)")
	}
	if strings.ContainsFunc(cfg.LogID, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, fmt.Errorf("signer: log id %q contains control characters", cfg.LogID)
	}
	doc := signer.KeyDocument{Log: cfg.LogID, Keys: []signer.KeyEntry{cfg.Key.Public().Entry(cfg.ValidFrom, nil)}}
	seen := map[string]bool{cfg.Key.KeyID(): true}
	keyIDs := []string{cfg.Key.KeyID()}
	for i, r := range cfg.Retired {
		switch {
		case len(r.Key.Key) == 0 || r.Key.KeyID == "":
			return nil, fmt.Errorf("signer: retired key %d is empty", i+1)
		case r.Key.KeyID == cfg.Key.KeyID():
			return nil, fmt.Errorf("signer: retired key %d (keyid %s) is the current key", i+1, r.Key.KeyID)
		case seen[r.Key.KeyID]:
			return nil, fmt.Errorf("signer: retired key %d (keyid %s) is listed twice", i+1, r.Key.KeyID)
		case r.ValidFrom.IsZero() || r.ValidTo.IsZero():
			return nil, fmt.Errorf("signer: retired key %d (keyid %s) needs validFrom and validTo", i+1, r.Key.KeyID)
		case !r.ValidTo.Truncate(time.Millisecond).After(r.ValidFrom.Truncate(time.Millisecond)):
			return nil, fmt.Errorf("signer: retired key %d (keyid %s): validTo %s is not after validFrom %s", i+1, r.Key.KeyID, signer.FormatTime(r.ValidTo), signer.FormatTime(r.ValidFrom))
		}
		if id, err := signer.KeyID(r.Key.Key); err != nil || id != r.Key.KeyID {
			return nil, fmt.Errorf("signer: retired key %d: keyid %s does not match its key", i+1, r.Key.KeyID)
		}
		seen[r.Key.KeyID] = true
		keyIDs = append(keyIDs, r.Key.KeyID)
		to := r.ValidTo
		doc.Keys = append(doc.Keys, r.Key.Entry(r.ValidFrom, &to))
	}
	keysJSON, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	// The document must be one a client accepts.
	if _, err := signer.ParseKeyDocument(keysJSON); err != nil {
		return nil, err
	}
	health, err := json.Marshal(Health{OK: true, KeyID: cfg.Key.KeyID()})
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Server{
		now:       now,
		key:       cfg.Key,
		keyIDs:    keyIDs,
		heads:     cfg.Heads,
		tokenHash: sha256.Sum256([]byte(cfg.Token)),
		keysJSON:  keysJSON,
		health:    health,
		log:       logger,
	}, nil
}

// CheckToken reports whether token is acceptable as the shared token: at least
// MinTokenLength characters of visible ASCII.
func CheckToken(token string) error {
	if token == "" {
		return errors.New("signer: the shared token is empty")
	}
	for _, c := range []byte(token) {
		if c <= ' ' || c >= 0x7f {
			return errors.New("signer: the shared token must be visible ASCII without spaces (a bearer token cannot carry others)")
		}
	}
	if len(token) < MinTokenLength {
		return fmt.Errorf("signer: the shared token has %d characters; use at least %d (e.g. openssl rand -hex 32)", len(token), MinTokenLength)
	}
	return nil
}

// KeyID is the current key's id.
func (s *Server) KeyID() string { return s.key.KeyID() }

// ServeHTTP routes a request and logs one line for it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusWriter{ResponseWriter: w}
	w.Header().Set("Date", s.now().UTC().Format(http.TimeFormat))
	var attrs []slog.Attr
	switch r.URL.Path {
	case "/sign":
		if allow(rec, r, http.MethodPost) {
			attrs = s.sign(rec, r)
		}
	case "/keys":
		if allow(rec, r, http.MethodGet, http.MethodHead) {
			writeJSONBytes(rec, http.StatusOK, s.keysJSON)
		}
	case "/health":
		if allow(rec, r, http.MethodGet, http.MethodHead) {
			writeJSONBytes(rec, http.StatusOK, s.health)
		}
	default:
		writeError(rec, http.StatusNotFound, "not found")
	}
	level := slog.LevelInfo
	if rec.status >= 400 {
		level = slog.LevelWarn
	}
	path := r.URL.Path
	if len(path) > 200 {
		path = path[:200] + "..."
	}
	attrs = append([]slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", path),
		slog.Int("status", rec.status),
		slog.Duration("duration", time.Since(start)),
		slog.String("remote", r.RemoteAddr),
	}, attrs...)
	s.log.LogAttrs(r.Context(), level, "signer request", attrs...)
}

// allow answers 405 (with Allow) unless r's method is one of methods.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed; use "+strings.Join(methods, " or "))
	return false
}

// sign handles POST /sign; it returns attributes for the request's log line.
func (s *Server) sign(w http.ResponseWriter, r *http.Request) []slog.Attr {
	if !s.authorized(r) {
		writeError(w, http.StatusUnauthorized, "unauthorized")
		return []slog.Attr{slog.String("error", "missing or wrong token")}
	}
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		msg := "Content-Type must be application/json"
		writeError(w, http.StatusUnsupportedMediaType, msg)
		return []slog.Attr{slog.String("error", msg)}
	}
	if r.ContentLength > MaxSignBody {
		msg := "request body is over " + strconv.Itoa(MaxSignBody) + " bytes"
		writeError(w, http.StatusRequestEntityTooLarge, msg)
		return []slog.Attr{slog.String("error", msg)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxSignBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			msg := "request body is over " + strconv.Itoa(MaxSignBody) + " bytes"
			writeError(w, http.StatusRequestEntityTooLarge, msg)
			return []slog.Attr{slog.String("error", msg)}
		}
		writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return []slog.Attr{slog.String("error", err.Error())}
	}
	req, th, err := ParseSignRequest(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return []slog.Attr{slog.String("error", err.Error())}
	}
	// The state is keyed by the log id signed into the head, never by what the log
	// server says besides it (req.Tenant), so no request can move a head to another
	// log's slot.
	key := th.Log
	attrs := []slog.Attr{slog.Uint64("treeSize", th.TreeSize), slog.String("log", key)}
	unlock := s.heads.Lock(key)
	defer unlock()
	last, known, own := s.lastOf(key)
	if status, msg := extends(key, last, known, req, th); status != 0 {
		last.Log = key
		body, _ := json.Marshal(Conflict{Error: msg, Last: last})
		writeJSONBytes(w, status, body)
		return append(attrs, slog.String("error", msg))
	}
	payload := []byte(req.Payload)
	if req.PayloadType == PayloadCheckpointNote { // the signed note is the Envelope's payload (note.go)
		payload, err = signNote(s.key, req.Payload)
	}
	var out []byte
	if err == nil {
		out, err = json.Marshal(receipt.Sign(req.PayloadType, payload, s.key))
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "signing failed: "+err.Error())
		return append(attrs, slog.String("error", err.Error()))
	}
	if !own || last.TreeSize != th.TreeSize {
		if !known {
			s.log.Warn("first head signed for this log: trusted on first use", slog.String("log", key), slog.Uint64("treeSize", th.TreeSize))
		} else if !own {
			s.log.Info("log carried over from its earlier name", slog.String("log", key), slog.String("from", last.Log), slog.Uint64("fromSize", last.TreeSize))
		}
		if err := s.heads.Record(SignedHead{Log: key, TreeSize: th.TreeSize, RootHash: th.RootHash}); err != nil {
			writeError(w, http.StatusInternalServerError, "the signer could not record the head it would sign; nothing was signed: "+err.Error())
			return append(attrs, slog.String("error", err.Error()))
		}
	}
	writeJSONBytes(w, http.StatusOK, out)
	return attrs
}

// lastOf is the head a new head of log key must extend: the last one signed under key
// (own), or else the last one signed under the log's earlier name. For a tenant's
// default log id (receipt.DefaultLogID) that is the last head signed for that tenant
// before every head named its log, kept under "tenant:<tenant>"; for the checkpoint
// chain of a tenant's default origin, the last checkpoint signed when the default
// origin named the key, "svc-log/<16 hex of a keyid>/<tenant>" (the current key's
// chain first, then the retired keys'). known is false when there is none.
func (s *Server) lastOf(key string) (last SignedHead, known, own bool) {
	if h, ok := s.heads.Last(key); ok {
		return h, true, true
	}
	if tenant, ok := receipt.ParseDefaultLogID(key); ok {
		if h, ok := s.heads.Last(StateKey("", tenant)); ok {
			return h, true, false
		}
	}
	origin, _ := strings.CutPrefix(key, checkpointKeyPrefix)
	if tenant, ok := receipt.ParseDefaultLogID(origin); ok && origin != key {
		for _, id := range s.keyIDs {
			if h, ok := s.heads.Last(checkpointKeyPrefix + receipt.DefaultLogIDPrefix + id[:16] + "/" + tenant); ok {
				return h, true, false
			}
		}
	}
	return SignedHead{}, false, false
}

// extends checks th against the last head signed for its log (known false: none): a
// larger head needs a valid consistency proof from that one, the same size the same
// root, and a smaller head is never signed. It returns 0 when th may be signed, else
// 409 and why not.
func extends(key string, last SignedHead, known bool, req *SignRequest, th *receipt.TreeHead) (int, string) {
	if !known {
		return 0, ""
	}
	name := "log " + strconv.Quote(key)
	switch {
	case th.TreeSize < last.TreeSize:
		return http.StatusConflict, fmt.Sprintf("refused: a head of size %d for %s, which already has a signed head of size %d; the signer never signs a smaller head (a rollback)", th.TreeSize, name, last.TreeSize)
	case th.TreeSize == last.TreeSize && th.RootHash != last.RootHash:
		return http.StatusConflict, fmt.Sprintf("refused: root %s at size %d for %s, which already has root %s signed at that size (a fork)", th.RootHash, th.TreeSize, name, last.RootHash)
	case th.TreeSize == last.TreeSize:
		return 0, ""
	case req.Consistency == nil:
		return http.StatusConflict, fmt.Sprintf("a head of size %d for %s needs a consistency proof from size %d, the last head signed for it", th.TreeSize, name, last.TreeSize)
	case req.Consistency.FromSize != last.TreeSize:
		return http.StatusConflict, fmt.Sprintf("the consistency proof is from size %d, but the last head signed for %s has size %d; send a proof from that one", req.Consistency.FromSize, name, last.TreeSize)
	}
	proof := make([]merkle.Hash, len(req.Consistency.Proof))
	for i, h := range req.Consistency.Proof {
		proof[i], _ = merkle.ParseHash(h) // checked by ParseSignRequest
	}
	oldRoot, _ := merkle.ParseHash(last.RootHash)
	newRoot, _ := merkle.ParseHash(th.RootHash)
	if err := merkle.VerifyConsistency(last.TreeSize, th.TreeSize, oldRoot, newRoot, proof); err != nil {
		return http.StatusConflict, fmt.Sprintf("refused: the head of size %d for %s does not extend the last head signed for it (size %d, root %s): %v", th.TreeSize, name, last.TreeSize, last.RootHash, err)
	}
	return 0, ""
}

// authorized compares the SHA-256 of the presented bearer token with the stored hash
// in constant time.
func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	token = strings.TrimLeft(token, " ")
	if token == "" {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], s.tokenHash[:]) == 1
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// ParseSignRequest parses a POST /sign body and checks that it asks for a tree head:
// payloadType is application/vnd.svc.treehead+json and the payload is the canonical
// JSON of a tree head that receipt.DecodeTreeHead accepts, with a lowercase hex
// rootHash. The error names what was wrong.
func ParseSignRequest(body []byte) (*SignRequest, *receipt.TreeHead, error) {
	var req SignRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, nil, fmt.Errorf("request body is not a sign request {payloadType, payload}: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("request body has data after the JSON object")
	}
	if req.PayloadType == "" {
		return nil, nil, errors.New("payloadType is missing")
	}
	if req.PayloadType != receipt.PayloadTreeHead && req.PayloadType != PayloadCheckpointNote {
		return nil, nil, fmt.Errorf("payloadType %q is refused: this signer signs only tree heads (%s) and C2SP checkpoints (%s)", req.PayloadType, receipt.PayloadTreeHead, PayloadCheckpointNote)
	}
	if len(req.Payload) == 0 {
		return nil, nil, errors.New("payload is missing or empty")
	}
	if req.PayloadType == PayloadCheckpointNote {
		th, err := checkpointHead(req.Payload)
		if err == nil {
			err = checkRequestExtras(&req)
		}
		if err != nil {
			return nil, nil, err
		}
		return &req, th, nil
	}
	th, err := receipt.DecodeTreeHead(&receipt.Envelope{PayloadType: req.PayloadType, Payload: req.Payload})
	if err != nil {
		return nil, nil, fmt.Errorf("payload is not a tree head: %v", err)
	}
	if b, err := hex.DecodeString(th.RootHash); err != nil || hex.EncodeToString(b) != th.RootHash {
		return nil, nil, fmt.Errorf("payload is not a tree head: rootHash %q is not lowercase hex", th.RootHash)
	}
	canon, err := receipt.Canonical(th)
	if err != nil || !bytes.Equal(canon, req.Payload) {
		return nil, nil, errors.New("payload is not a tree head in canonical JSON (keys sorted, no whitespace, no empty log)")
	}
	if th.Log == "" {
		return nil, nil, errors.New(`payload is a tree head without a "log": this signer signs only heads that name their log (the append-only state is kept per log id, the name the signature covers); upgrade the log server, which names every head's log`)
	}
	if err := checkRequestExtras(&req); err != nil {
		return nil, nil, err
	}
	return &req, th, nil
}

// checkRequestExtras checks a sign request's tenant and consistency proof.
func checkRequestExtras(req *SignRequest) error {
	if len(req.Tenant) > 200 || strings.ContainsFunc(req.Tenant, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errors.New("tenant must be at most 200 characters without control characters")
	}
	if c := req.Consistency; c != nil {
		if len(c.Proof) > MaxProofHashes {
			return fmt.Errorf("consistency proof has %d hashes; at most %d", len(c.Proof), MaxProofHashes)
		}
		for i, h := range c.Proof {
			if _, err := merkle.ParseHash(h); err != nil || strings.ToLower(h) != h {
				return fmt.Errorf("consistency proof hash %d is not 64 lowercase hex characters", i+1)
			}
		}
	}
	return nil
}

// Serve serves s on ln until ctx is cancelled, then shuts down gracefully, letting
// requests in flight finish for up to ShutdownTimeout. It returns nil after a clean
// shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if host, _, err := net.SplitHostPort(ln.Addr().String()); err == nil {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			s.log.Warn("signer listens on a non-loopback address over plain HTTP; the token travels in clear text: put TLS in front of it or bind to 127.0.0.1",
				slog.String("addr", ln.Addr().String()))
		}
	}
	// Headers within 5 s, a body within 30 s, an answer within 30 s (one signature),
	// idle connections closed after 2 min, headers at most 64 KiB, 1024 connections,
	// 256 of them per client address (a log server's client opens at most 64).
	lim := httplimits.Limits{ReadHeader: 5 * time.Second, Read: 30 * time.Second, Write: 30 * time.Second,
		Idle: 2 * time.Minute, MaxHeaderBytes: 64 << 10, MaxConnsPerAddr: 256}
	hs := lim.Server(s)
	hs.ErrorLog = slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
	hs.BaseContext = func(net.Listener) context.Context { return context.WithoutCancel(ctx) }
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(lim.Listener(ln)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func writeJSONBytes(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(body)
	w.Write([]byte("\n"))
}

func writeError(w http.ResponseWriter, status int, msg string) {
	body, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	writeJSONBytes(w, status, body)
}
