package portal

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/httpjson"
	"svc.dev/svc/httplimits"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/portal/web"
)

// MaxBody caps a request body of the API; MaxWebhookBody the billing webhook's.
const (
	MaxBody        = 8 << 10
	MaxWebhookBody = 256 << 10
)

// Config configures a portal. Admin, View, JS, Store and Secret are required.
type Config struct {
	// Admin publishes administrative events; View is this process's fold of them.
	Admin *tenancy.Admin
	View  *tenancy.View
	// JS reads the tenant's appends this month from SVC_LEAVES (the exact count the
	// quota uses).
	JS jetstream.JetStream
	// Store is the log's database: usage, audit, checkpoints, and the portal's
	// accounts, sessions and billing events.
	Store *store.Store
	// Secret signs session cookies; at least 32 bytes.
	Secret []byte
	// PublicURL is the log's public base URL (urls.log, the export command, the
	// tree size and root). A https URL makes the session cookie Secure.
	PublicURL string
	// LogURL is where this process reads the log's head (/head, /root); default
	// PublicURL (set it when the portal reaches the log by another address).
	LogURL string
	// CheckpointsURL is the public checkpoints host (urls.checkpoints); optional.
	// SvcCommand is how tenants run svc in the export command the dashboard shows;
	// default "svc" (svc portal sets how it was itself started, e.g. bin/svc).
	SvcCommand     string
	CheckpointsURL string
	// PortalURL is the portal's own public address, where billing returns the
	// browser; required with Billing. A https URL makes the session cookie Secure.
	PortalURL string
	// Billing, when set, turns on checkout, the billing portal and the webhook.
	Billing *Billing
	// TrustProxy says which address the throttles count behind a proxy (the zero
	// value: the peer; see httplimits.Proxy for which form suits which proxy).
	TrustProxy httplimits.Proxy
	// Web is the tree served at the site root; default web.FS.
	Web fs.FS
	// SessionTTL is how long a session lives; default 7 days.
	SessionTTL time.Duration
	// RegisterBurst registrations are allowed from one address (default 5), then one
	// per RegisterEvery (default 1 h).
	RegisterBurst int
	RegisterEvery time.Duration
	// LoginBurst login attempts are allowed from one address (default 10), then one
	// per LoginEvery (default 6 s).
	LoginBurst int
	LoginEvery time.Duration
	// NoThrottle turns the registration and login throttles off, for local testing
	// (SPEC's throttle locks a tester out for an hour after a few registrations from
	// 127.0.0.1). New refuses it unless PublicURL, and PortalURL when given, name a
	// loopback host: a portal others can reach always throttles.
	NoThrottle bool
	// KeyBurst API keys may be created for one tenant (default 5), then one per
	// KeyEvery (default 1 min); beyond, 429 with Retry-After. Live keys are capped
	// at tenancy.MaxLiveTokens (25) whatever the rate.
	KeyBurst int
	KeyEvery time.Duration
	// Scrypt is the cost of password hashes; zero: DefaultScrypt.
	Scrypt ScryptParams
	// MaxHashing bounds how many password hashes (scrypt, 32 MiB each at
	// DefaultScrypt) are computed at once, across all clients; default
	// DefaultMaxHashing (4). A login or registration that finds no slot waits up to
	// HashWait (default DefaultHashWait, 2 s), then gets 503 with Retry-After.
	MaxHashing int
	HashWait   time.Duration
	Logger     *slog.Logger
	Now        func() time.Time // default time.Now
}

// Portal is the HTTP handler of the portal.
type Portal struct {
	cfg       Config
	mux       *http.ServeMux
	log       *slog.Logger
	secure    bool
	register  *throttle
	login     *throttle
	billing   *billing
	portalURL string
	dummy     func() string // a hash at cfg.Scrypt that no password matches
	hashing   *hashGate     // bounds concurrent scrypt computations
	keys      *throttle     // key creations per tenant
	logClient *http.Client
}

// New checks cfg and builds the routes.
func New(cfg Config) (*Portal, error) {
	switch {
	case cfg.Admin == nil || cfg.View == nil || cfg.JS == nil || cfg.Store == nil:
		return nil, errors.New("portal: the admin publisher, view, broker and store are required")
	case len(cfg.Secret) < 32:
		return nil, fmt.Errorf("portal: the session secret has %d bytes; give at least 32 (e.g. openssl rand -hex 32)", len(cfg.Secret))
	case cfg.PublicURL == "":
		return nil, errors.New("portal: the log's public URL is required")
	}
	if err := checkNoThrottle(cfg); err != nil {
		return nil, err
	}
	cfg.defaults()
	p := &Portal{cfg: cfg, mux: http.NewServeMux(), log: cfg.Logger,
		register: newThrottle(cfg.RegisterBurst, cfg.RegisterEvery),
		login:    newThrottle(cfg.LoginBurst, cfg.LoginEvery), logClient: &http.Client{Timeout: 3 * time.Second},
		hashing: newHashGate(cfg.MaxHashing, cfg.HashWait), keys: newThrottle(cfg.KeyBurst, cfg.KeyEvery)}
	p.portalURL = strings.TrimRight(cfg.PortalURL, "/")
	p.dummy = sync.OnceValue(func() string {
		h, err := hashPassword(fmt.Sprintf("no such account %p", p), cfg.Scrypt)
		if err != nil {
			panic(err) // only crypto/rand failing
		}
		return h
	})
	p.secure = strings.HasPrefix(cfg.PublicURL, "https://") || strings.HasPrefix(p.portalURL, "https://")
	if cfg.Billing != nil {
		if cfg.PortalURL == "" {
			return nil, errors.New("portal: billing needs the portal's own public URL (--portal-url), where the payment provider returns the browser")
		}
		b, err := newBilling(*cfg.Billing)
		if err != nil {
			return nil, err
		}
		p.billing = b
	}
	p.routes()
	return p, nil
}

// defaults fills in the zero fields of cfg and trims the URLs' trailing slashes.
func (cfg *Config) defaults() {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Web == nil {
		cfg.Web = web.FS
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 7 * 24 * time.Hour
	}
	if cfg.RegisterBurst <= 0 {
		cfg.RegisterBurst = 5
	}
	if cfg.RegisterEvery <= 0 {
		cfg.RegisterEvery = time.Hour
	}
	if cfg.LoginBurst <= 0 {
		cfg.LoginBurst = 10
	}
	if cfg.LoginEvery <= 0 {
		cfg.LoginEvery = 6 * time.Second
	}
	if cfg.KeyBurst <= 0 {
		cfg.KeyBurst = 5
	}
	if cfg.KeyEvery <= 0 {
		cfg.KeyEvery = time.Minute
	}
	if cfg.Scrypt == (ScryptParams{}) {
		cfg.Scrypt = DefaultScrypt
	}
	if cfg.MaxHashing <= 0 {
		cfg.MaxHashing = DefaultMaxHashing
	}
	if cfg.HashWait <= 0 {
		cfg.HashWait = DefaultHashWait
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	if cfg.SvcCommand == "" {
		cfg.SvcCommand = "svc"
	}
	cfg.CheckpointsURL = strings.TrimRight(cfg.CheckpointsURL, "/")
	cfg.LogURL = strings.TrimRight(cfg.LogURL, "/")
	if cfg.LogURL == "" {
		cfg.LogURL = cfg.PublicURL
	}
}

func (p *Portal) routes() {
	p.mux.HandleFunc("GET /health", p.health)
	p.mux.Handle("POST /api/register", p.write(http.HandlerFunc(p.handleRegister)))
	p.mux.Handle("POST /api/login", p.write(http.HandlerFunc(p.handleLogin)))
	p.mux.Handle("POST /api/logout", p.write(p.session(p.handleLogout)))
	p.mux.Handle("GET /api/me", p.session(p.handleMe))
	p.mux.Handle("GET /api/overview", p.session(p.handleOverview))
	p.mux.Handle("GET /api/keys", p.session(p.handleKeys))
	p.mux.Handle("POST /api/keys", p.write(p.session(p.handleAddKey)))
	p.mux.Handle("POST /api/keys/{prefix}/revoke", p.write(p.session(p.handleRevoke)))
	p.mux.Handle("POST /api/checkout", p.write(p.session(p.handleCheckout)))
	p.mux.Handle("POST /api/billing-portal", p.write(p.session(p.handleBillingPortal)))
	p.mux.HandleFunc("POST /stripe/webhook", p.handleWebhook)
	p.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		httpjson.WriteError(w, http.StatusNotFound, "no such portal route: "+r.Method+" "+r.URL.Path)
	})
	files := http.FileServerFS(p.cfg.Web)
	p.mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			httpjson.WriteError(w, http.StatusMethodNotAllowed, "the portal's pages take GET")
			return
		}
		setPageHeaders(w)
		files.ServeHTTP(w, r)
	}))
}

// ServeHTTP implements http.Handler.
func (p *Portal) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.mux.ServeHTTP(w, r) }

// setPageHeaders: the front loads only its own files and is never framed.
func setPageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
}

func (p *Portal) health(w http.ResponseWriter, _ *http.Request) {
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "stripe": p.billing != nil})
}

// fail answers err: administrative errors by kind, anything else 503 (logged).
func (p *Portal) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusServiceUnavailable
	var se *statusError
	switch {
	case errors.As(err, &se):
		status = se.status
	case errors.Is(err, tenancy.ErrInvalid):
		status = http.StatusBadRequest
	case errors.Is(err, tenancy.ErrTenantExists), errors.Is(err, tenancy.ErrTooManyTokens):
		status = http.StatusConflict
	case errors.Is(err, tenancy.ErrNoTenant), errors.Is(err, tenancy.ErrNoToken):
		status = http.StatusNotFound
	}
	if status >= 500 {
		p.log.Warn("portal request failed", "path", r.URL.Path, "err", err)
		httpjson.WriteError(w, status, "the portal could not complete this request; try again shortly")
		return
	}
	httpjson.WriteError(w, status, err.Error())
}

func itoa(n int) string { return fmt.Sprint(n) }

// checkNoThrottle refuses NoThrottle unless every public address of the portal is
// a loopback one.
func checkNoThrottle(cfg Config) error {
	if !cfg.NoThrottle {
		return nil
	}
	for name, raw := range map[string]string{"public URL": cfg.PublicURL, "portal URL": cfg.PortalURL} {
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || !httplimits.LoopbackHost(u.Host) {
			return fmt.Errorf("portal: the throttles can be turned off only for local testing, and the %s %q is not a loopback address (127.0.0.1, ::1, localhost)", name, raw)
		}
	}
	return nil
}
