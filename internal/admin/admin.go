package admin

import (
	"context"
	"crypto/sha256"
	"encoding/csv"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/httpjson"
	"svc.dev/svc/httplimits"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/tenancy"
)

// MaxBody caps an admin request body.
const MaxBody = 16 << 10

// MinTokenLen is the shortest admin token accepted: it stands for the operator, so
// it must be beyond guessing (32 random hex characters are 128 bits).
const MinTokenLen = 32

// CheckToken refuses an admin token too short to be a secret, saying what to do.
func CheckToken(token string) error {
	if len(token) < MinTokenLen {
		return fmt.Errorf("admin: the admin token has %d characters; give at least %d random ones (e.g. openssl rand -hex 32)", len(token), MinTokenLen)
	}
	return nil
}

// Config configures the admin routes.
type Config struct {
	// Token is the admin token; required, at least MinTokenLen characters. Only its
	// SHA-256 is kept.
	Token string
	// Admin publishes administrative events; View is this process's fold of them.
	// Both required.
	Admin *tenancy.Admin
	View  *tenancy.View
	// Store holds usage and the audit trail; required.
	Store *store.Store
	// Usage, when set, gives the exact count of a tenant's appends this month (the
	// sequencer's quota); the store's projection answers otherwise.
	Usage func(tenant string) (month string, appends uint64, ok bool)
	// PublicURL is the log's public base URL (https://log.example.com): the welcome
	// text of a new token names it, /admin/info reports it, and the cross-site check
	// accepts its host as an Origin. Empty: the welcome text has no URL, and only the
	// request's Host is accepted.
	PublicURL string
	// CheckpointsURL is the host serving the checkpoints' file form, reported by
	// /admin/info; empty: none reported.
	CheckpointsURL string
	// KeyID is the log key's id (signer.KeyID), reported by /admin/info and shown on
	// the page; empty: none shown.
	KeyID string
	// TrustProxy says which address of a request the throttle of wrong attempts
	// counts (SPEC.md's --trust-proxy); the zero value counts the peer's address.
	TrustProxy httplimits.Proxy
	// ThrottleTable caps the addresses the throttle of wrong attempts tracks; default
	// DefaultThrottleTable. Active blocks are never dropped to make room.
	ThrottleTable int
	// Logger receives the admin API's structured logs; default slog.Default().
	Logger *slog.Logger
	// Now is the clock of the throttle and the usage month; default time.Now (tests
	// inject one).
	Now func() time.Time
}

// Handler serves /admin and /admin/*.
type Handler struct {
	cfg   Config
	token [32]byte
	mux   *http.ServeMux
	thr   throttle
	log   *slog.Logger
}

// New checks cfg and builds the routes.
func New(cfg Config) (*Handler, error) {
	if err := CheckToken(cfg.Token); err != nil {
		return nil, err
	}
	switch {
	case cfg.Admin == nil || cfg.View == nil || cfg.Store == nil:
		return nil, errors.New("admin: the admin publisher, view and store are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ThrottleTable <= 0 {
		cfg.ThrottleTable = DefaultThrottleTable
	}
	h := &Handler{cfg: cfg, token: sha256.Sum256([]byte(cfg.Token)), mux: http.NewServeMux(), log: cfg.Logger}
	h.thr.size = cfg.ThrottleTable
	routes := map[string]func(http.ResponseWriter, *http.Request, string){
		"GET /admin":                                      h.page,
		"POST /admin/page":                                h.pageAction,
		"GET /admin/tenants":                              h.listTenants,
		"POST /admin/tenants":                             h.write(h.addTenant, true),
		"POST /admin/tenants/{id}/disable":                h.write(h.disable, false),
		"POST /admin/tenants/{id}/plan":                   h.write(h.plan, true),
		"POST /admin/tenants/{id}/public":                 h.write(h.public, true),
		"GET /admin/tenants/{id}/tokens":                  h.listTokens,
		"POST /admin/tenants/{id}/tokens":                 h.write(h.addToken, true),
		"POST /admin/tenants/{id}/tokens/{prefix}/revoke": h.write(h.revoke, false),
		"GET /admin/usage":                                h.usage,
		"GET /admin/usage.csv":                            h.usageCSV,
		"GET /admin/audit":                                h.audit,
		"GET /admin/info":                                 h.info,
	}
	for pattern, f := range routes {
		h.mux.Handle(pattern, h.gate(f))
	}
	h.mux.Handle("/admin/", h.gate(func(w http.ResponseWriter, r *http.Request, _ string) {
		httpjson.WriteError(w, http.StatusNotFound, "no such admin route: "+r.Method+" "+r.URL.Path)
	}))
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// gate checks the admin token before anything else, throttling an address after
// MaxFailures wrong attempts.
func (h *Handler) gate(f func(http.ResponseWriter, *http.Request, string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := httplimits.ClientAddr(r, h.cfg.TrustProxy)
		now := h.cfg.Now()
		if left, blocked := h.thr.blocked(addr, now); blocked {
			w.Header().Set("Retry-After", strconv.Itoa(int((left+time.Second-1)/time.Second)))
			httpjson.WriteError(w, http.StatusTooManyRequests, "too many wrong admin credentials from this address; retry in a minute")
			return
		}
		token, actor := credentials(r, addr)
		if !tokenMatches(token, h.token) {
			if token != "" {
				tracked := h.thr.fail(addr, now)
				h.log.Warn("wrong admin credentials", "addr", addr, "path", r.URL.Path, "counted", tracked)
			}
			w.Header().Set("WWW-Authenticate", basicRealmHdr)
			httpjson.WriteError(w, http.StatusUnauthorized, "unauthorized")
			return
		}
		f(w, r, actor)
	})
}

// statusOf maps an administrative error to its status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, tenancy.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, tenancy.ErrTenantExists), errors.Is(err, tenancy.ErrTooManyTokens):
		return http.StatusConflict
	case errors.Is(err, tenancy.ErrNoTenant), errors.Is(err, tenancy.ErrNoToken):
		return http.StatusNotFound
	}
	return http.StatusServiceUnavailable
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	if status >= 500 {
		h.log.Warn("admin request failed", "path", r.URL.Path, "err", err)
	}
	httpjson.WriteError(w, status, err.Error())
}

// decode reads a JSON body of at most MaxBody bytes into v, refusing unknown fields
// and data after the value.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	return httpjson.Decode(w, r, MaxBody, v)
}

// tenantJSON is the Tenant of the admin API.
type tenantJSON struct {
	ID         string  `json:"id"`
	LogID      string  `json:"logId"`
	Plan       string  `json:"plan"`
	Disabled   bool    `json:"disabled"`
	CreatedAt  string  `json:"createdAt"`
	LiveTokens int     `json:"liveTokens"`
	Quota      *uint64 `json:"quota"`
}

func toJSON(t tenancy.Tenant) tenantJSON {
	return tenantJSON{ID: t.ID, LogID: t.LogID, Plan: t.Plan, Disabled: t.Disabled, CreatedAt: t.CreatedAt, LiveTokens: t.LiveTokens(), Quota: quota(t.Plan)}
}

func quota(plan string) *uint64 {
	if n, ok := tenancy.Allowance(plan); ok {
		return &n
	}
	return nil
}

func (h *Handler) listTenants(w http.ResponseWriter, r *http.Request, _ string) {
	out := []tenantJSON{}
	for _, t := range h.cfg.View.Tenants() {
		out = append(out, toJSON(t))
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"tenants": out})
}

func (h *Handler) addTenant(w http.ResponseWriter, r *http.Request, actor string) {
	var req struct {
		ID    string `json:"id"`
		LogID string `json:"logId"`
	}
	if !decode(w, r, &req) {
		return
	}
	t, err := h.cfg.Admin.AddTenant(r.Context(), actor, req.ID, req.LogID)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusCreated, map[string]any{"tenant": toJSON(t)})
}

func (h *Handler) disable(w http.ResponseWriter, r *http.Request, actor string) {
	t, err := h.cfg.Admin.DisableTenant(r.Context(), actor, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"tenant": toJSON(t)})
}

func (h *Handler) plan(w http.ResponseWriter, r *http.Request, actor string) {
	var req struct {
		Plan string `json:"plan"`
	}
	if !decode(w, r, &req) {
		return
	}
	t, err := h.cfg.Admin.SetPlan(r.Context(), actor, r.PathValue("id"), req.Plan)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"tenant": toJSON(t)})
}

// public is POST /admin/tenants/{id}/public {"public": bool}: the tenant opts its log
// public (entry bundles without a token) or back private.
func (h *Handler) public(w http.ResponseWriter, r *http.Request, actor string) {
	var req struct {
		Public *bool `json:"public"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.Public == nil {
		httpjson.WriteError(w, http.StatusBadRequest, `want {"public": true} or {"public": false}`)
		return
	}
	t, err := h.cfg.Admin.SetPublic(r.Context(), actor, r.PathValue("id"), *req.Public)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"tenant": toJSON(t), "public": t.Public})
}

func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request, _ string) {
	t, ok := h.cfg.View.Tenant(r.PathValue("id"))
	if !ok {
		h.fail(w, r, fmt.Errorf("%w: %q", tenancy.ErrNoTenant, r.PathValue("id")))
		return
	}
	toks := t.Tokens
	if toks == nil {
		toks = []tenancy.Token{}
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"tokens": toks})
}

// Welcome is the text shown with a new token: how to use it, as commands that run
// when pasted: the token itself when known, else "$SVC_LOG_TOKEN" (the variable the
// gateway config names). Without publicURL (svc log-admin without --public-url) it
// names the route and how to get a ready command instead of printing a placeholder.
func Welcome(publicURL, tenant, token string) string {
	base := strings.TrimRight(publicURL, "/")
	path := "/t/" + tenant
	if tenant == "default" {
		path = ""
	}
	if base == "" {
		return "This token is shown once; only its hash is kept. Append with POST " + path + "/append on the log server and the header Authorization: Bearer followed by the token (give --public-url for a ready curl line)."
	}
	auth := `"Authorization: Bearer $SVC_LOG_TOKEN"`
	if token != "" {
		auth = "'Authorization: Bearer " + token + "'"
	}
	return "This token is shown once; only its hash is kept. Append with: curl -H " + auth + " -d '{\"leaf\":\"hello\"}' " +
		base + path + "/append ; in a gateway config (the token in SVC_LOG_TOKEN): \"log\": {\"url\": \"" + base + path + "/append\", \"tokenEnv\": \"SVC_LOG_TOKEN\"}"
}

func (h *Handler) addToken(w http.ResponseWriter, r *http.Request, actor string) {
	var req struct {
		Label string `json:"label"`
	}
	if !decode(w, r, &req) {
		return
	}
	id := r.PathValue("id")
	token, tok, err := h.cfg.Admin.AddToken(r.Context(), actor, id, req.Label)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusCreated, map[string]any{"token": token, "tokenHash": tok.TokenHash, "welcome": Welcome(h.cfg.PublicURL, id, token)})
}

func (h *Handler) revoke(w http.ResponseWriter, r *http.Request, actor string) {
	n, err := h.cfg.Admin.RevokeToken(r.Context(), actor, r.PathValue("id"), r.PathValue("prefix"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"revoked": n})
}

// usageLine is one tenant's usage of a month.
type usageLine struct {
	Tenant      string  `json:"tenant"`
	LogID       string  `json:"logId"`
	Plan        string  `json:"plan"`
	Appends     uint64  `json:"appends"`
	Quota       *uint64 `json:"quota"`
	TotalLeaves uint64  `json:"totalLeaves"`
	LiveTokens  int     `json:"liveTokens"`
	Disabled    bool    `json:"disabled"`
}

func (h *Handler) month(w http.ResponseWriter, r *http.Request) (string, bool) {
	m := r.URL.Query().Get("month")
	if m == "" {
		return h.cfg.Now().UTC().Format("2006-01"), true
	}
	if _, err := time.Parse("2006-01", m); err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, fmt.Sprintf("month %q: want YYYY-MM", m))
		return "", false
	}
	return m, true
}

func (h *Handler) usageLines(ctx context.Context, month string) ([]usageLine, error) {
	byTenant, err := h.cfg.Store.UsageByTenant(ctx, month)
	if err != nil {
		return nil, err
	}
	out := []usageLine{}
	for _, t := range h.cfg.View.Tenants() {
		u := byTenant[t.ID]
		appends := u.Appends
		if h.cfg.Usage != nil {
			if m, n, ok := h.cfg.Usage(t.ID); ok && m == month {
				appends = max(appends, n)
			}
		}
		out = append(out, usageLine{Tenant: t.ID, LogID: t.LogID, Plan: t.Plan, Appends: appends, Quota: quota(t.Plan),
			TotalLeaves: u.TotalLeaves, LiveTokens: t.LiveTokens(), Disabled: t.Disabled})
	}
	return out, nil
}

// usageOf reads the month a usage request names and every tenant's usage in it; on
// false the refusal has been written.
func (h *Handler) usageOf(w http.ResponseWriter, r *http.Request) (string, []usageLine, bool) {
	month, ok := h.month(w, r)
	if !ok {
		return "", nil, false
	}
	lines, err := h.usageLines(r.Context(), month)
	if err != nil {
		h.fail(w, r, err)
		return "", nil, false
	}
	return month, lines, true
}

func (h *Handler) usage(w http.ResponseWriter, r *http.Request, _ string) {
	month, lines, ok := h.usageOf(w, r)
	if !ok {
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"month": month, "tenants": lines})
}

// CSVHeader is the header line of /admin/usage.csv.
var CSVHeader = []string{"month", "tenant", "log_id", "plan", "appends", "quota", "total_leaves", "live_tokens", "disabled"}

func (h *Handler) usageCSV(w http.ResponseWriter, r *http.Request, _ string) {
	month, lines, ok := h.usageOf(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="svc-usage-`+month+`.csv"`)
	w.Header().Set("Cache-Control", "no-store")
	cw := csv.NewWriter(w)
	_ = cw.Write(CSVHeader)
	for _, l := range lines {
		q := ""
		if l.Quota != nil {
			q = strconv.FormatUint(*l.Quota, 10)
		}
		_ = cw.Write([]string{month, l.Tenant, l.LogID, l.Plan, strconv.FormatUint(l.Appends, 10), q,
			strconv.FormatUint(l.TotalLeaves, 10), strconv.Itoa(l.LiveTokens), strconv.FormatBool(l.Disabled)})
	}
	cw.Flush()
}

func (h *Handler) audit(w http.ResponseWriter, r *http.Request, _ string) {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			httpjson.WriteError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want a positive integer", v))
			return
		}
		limit = min(n, 1000)
	}
	entries, err := h.cfg.Store.Audit(r.Context(), r.URL.Query().Get("tenant"), limit)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]client.AuditEntry, len(entries))
	for i, e := range entries {
		out[i] = e.AuditEntry
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"entries": out})
}

func (h *Handler) info(w http.ResponseWriter, r *http.Request, _ string) {
	dbOK := h.cfg.Store.Pool.Ping(r.Context()) == nil
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{
		"publicUrl": h.cfg.PublicURL, "checkpointsUrl": h.cfg.CheckpointsURL, "keyid": h.cfg.KeyID,
		"tenants": len(h.cfg.View.Tenants()), "adminSeq": h.cfg.View.Seq(), "database": dbOK,
	})
}
