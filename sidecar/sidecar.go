// Package sidecar is the SDK issuer's local HTTP API (SPEC.md, "Sidecar"): any
// language records tool calls through it and gets the same receipts, with the same
// key, as the in-process issuer. `svc serve` runs it.
//
// Routes (all bodies JSON):
//
//	GET  /health   { agentId, keyid, log: { kind: file, http or nats, where } }
//	POST /decide   ToolEvent -> PolicyDecision, or null when no policy is configured;
//	               records nothing
//	POST /record   { event: ToolEvent, outcome, policy? } -> 200 with the receipt
//	               bundle exactly as written to receipts/<id>.json; without a
//	               policy the receipt's policy is null (SPEC: "what /decide
//	               returned, or null"): the sidecar never decides on the
//	               caller's behalf, even with a policy configured
//
// Errors are { error } naming what was wrong: 400 for a malformed event, outcome or
// policy, or an outcome inconsistent with the decision (SPEC's rules: an allow never
// pairs with denied, a deny always does; the verifier would reject the receipt); 413 for a body over MaxBody (1 MiB); 415 for a POST whose Content-Type is
// not application/json; 502 naming the log and its refusal when the log would not take
// the leaf (no bundle is written); 404 for any other path; 405 for a known path with
// the wrong method; 403 for a request from a browser page of another origin or, when
// the server is bound to loopback, one whose Host is not a loopback name.
//
// The sidecar has no authentication of its own: it is meant to be bound to loopback.
// Requiring a JSON content type forces a browser's CORS preflight (which the sidecar
// never grants), and the Host check defeats DNS rebinding, so a web page the user
// visits cannot record receipts in the agent's name.
package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"

	"svc.dev/svc/httplimits"
	"svc.dev/svc/sdk"
)

// MaxBody caps a request body.
const MaxBody = 1 << 20

// Options configure a Server.
type Options struct {
	// Remote, when true, accepts any Host header (the server was bound to a
	// non-loopback address on purpose, with --allow-remote).
	Remote bool
	Logger *slog.Logger // default: discard
}

// Server serves the sidecar routes for one issuer.
type Server struct {
	is     *sdk.Issuer
	remote bool
	log    *slog.Logger
}

// New makes a Server.
func New(is *sdk.Issuer, o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Server{is: is, remote: o.Remote, log: o.Logger}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if msg := s.refuseOrigin(r); msg != "" {
		writeError(w, http.StatusForbidden, msg)
		return
	}
	var method string
	var h func(http.ResponseWriter, *http.Request)
	switch r.URL.Path {
	case "/health":
		method, h = http.MethodGet, s.health
	case "/decide":
		method, h = http.MethodPost, s.decide
	case "/record":
		method, h = http.MethodPost, s.record
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s; the sidecar serves GET /health, POST /decide and POST /record", r.Method, r.URL.Path))
		return
	}
	if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", method)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s takes %s, not %s", r.URL.Path, method, r.Method))
		return
	}
	h(w, r)
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.is.Health())
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	ev, err := sdk.ParseToolEvent(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	d, err := s.is.Decide(*ev)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if d == nil {
		writeRaw(w, http.StatusOK, []byte("null\n"))
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) record(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	req, err := sdk.ParseRecordRequest(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	// No decision sent: the receipt records null (DESIGN.md), whatever policy is
	// configured; a sent decision is checked against the outcome by Record.
	rc, err := s.is.Record(r.Context(), req.Event, req.Outcome, req.Policy)
	var ie *sdk.InputError
	var le *sdk.LogError
	switch {
	case errors.As(err, &ie):
		writeError(w, http.StatusBadRequest, err.Error())
		return
	case errors.As(err, &le):
		s.log.Warn("log refused a receipt", "tool", req.Event.Tool, "err", err)
		writeError(w, http.StatusBadGateway, err.Error())
		return
	case err != nil:
		s.log.Error("record failed", "tool", req.Event.Tool, "err", err)
		writeError(w, http.StatusInternalServerError, "recording the receipt failed: "+err.Error())
		return
	}
	// The bundle exactly as written to disk.
	data, err := os.ReadFile(rc.Path)
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("receipt %s was written but cannot be read back: %v", rc.ID, err))
		return
	}
	w.Header().Set("Location", "receipts/"+rc.ID+".json")
	writeRaw(w, http.StatusOK, data)
}

// readBody reads a capped JSON body, answering 413 or 415 itself.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: send the body as application/json", r.Header.Get("Content-Type")))
		return nil, false
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body is larger than %d bytes", MaxBody))
		} else {
			writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		}
		return nil, false
	}
	return data, true
}

// refuseOrigin returns why a request that may come from a browser page is refused, or
// "".
func (s *Server) refuseOrigin(r *http.Request) string {
	if s.remote {
		return ""
	}
	if !LoopbackHost(r.Host) {
		return fmt.Sprintf("Host %q is not a loopback name; the sidecar answers only local clients", r.Host)
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || !LoopbackHost(u.Host) {
			return fmt.Sprintf("requests from the web page %s are refused", o)
		}
	}
	return ""
}

// LoopbackHost reports whether host (with or without port) names the loopback
// interface: localhost, 127.0.0.0/8 or ::1 (httplimits.LoopbackHost).
func LoopbackHost(host string) bool { return httplimits.LoopbackHost(host) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeRaw(w, status, append(data, '\n'))
}

func writeRaw(w http.ResponseWriter, status int, data []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	data, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	writeRaw(w, status, append(data, '\n'))
}
