package portal

import (
	"context"
	"errors"
	"net/http"
	"net/mail"
	"net/url"
	"strings"

	"svc.dev/svc/httpjson"
	"svc.dev/svc/httplimits"

	"github.com/jackc/pgx/v5/pgconn"

	"svc.dev/svc/internal/admin"
	"svc.dev/svc/internal/tenancy"
)

// Field bounds of the API (SPEC.md, "Portal").
const (
	MinPassword = 10
	MaxPassword = 200
	MaxEmail    = 254
	MinTenant   = tenancy.MinSelfRegisteredID
	MaxTenant   = tenancy.MaxSelfRegisteredID
)

// registerRequest is the body of POST /api/register.
type registerRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
	Tenant   string `json:"tenant"`
}

// loginRequest is the body of POST /api/login.
type loginRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

// keyRequest is the body of POST /api/keys.
type keyRequest struct {
	Label string `json:"label"`
}

// emptyRequest is the body of the writes that take {}.
type emptyRequest struct{}

// validEmail returns the canonical (lower-case) form of a plain address.
func validEmail(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("email: missing; give an address such as ada@example.com")
	}
	if len(s) > MaxEmail {
		return "", errors.New("email: give an address of at most 254 characters")
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return "", errors.New("email: give a plain address such as ada@example.com")
	}
	return strings.ToLower(s), nil
}

// validate checks a registration's fields and canonicalises the email.
func (q *registerRequest) validate() error {
	email, err := validEmail(q.Email)
	if err != nil {
		return err
	}
	q.Email = email
	if n := len([]rune(q.Password)); n < MinPassword || len(q.Password) > MaxPassword {
		return errors.New("password: give 10 or more characters (at most 200 bytes)")
	}
	// Checked before anything is created: the operator's rule (tenancy's, which
	// AddTenant applies) with SPEC's stricter self-registration rule on top.
	if tenancy.CheckSelfRegisteredID(q.Tenant) != nil {
		return errors.New("tenant: " + tenancy.SelfRegisteredRule)
	}
	return nil
}

func actorOf(email string) string { return "portal:" + email }

// throttled answers 429 when addr has no token left in t.
// NoThrottle (local testing) lets everything through.
func (p *Portal) throttled(w http.ResponseWriter, r *http.Request, t *throttle, what string) bool {
	if p.cfg.NoThrottle {
		return false
	}
	ok, wait := t.allow(httplimits.ClientAddr(r, p.cfg.TrustProxy), p.cfg.Now())
	if ok {
		return false
	}
	secs := int(wait.Seconds()) + 1
	w.Header().Set("Retry-After", itoa(secs))
	httpjson.WriteError(w, http.StatusTooManyRequests, "too many "+what+" from this address; retry in "+itoa(secs)+" s")
	return true
}

// hashSlot takes a password hashing slot, or answers 503 with Retry-After and
// returns nil when none freed within the wait.
func (p *Portal) hashSlot(w http.ResponseWriter, r *http.Request) func() {
	release := p.hashing.acquire(r.Context())
	if release == nil {
		p.log.Warn("portal: password hashing busy; request refused", "addr", httplimits.ClientAddr(r, p.cfg.TrustProxy), "maxHashing", p.cfg.MaxHashing)
		w.Header().Set("Retry-After", "1")
		httpjson.WriteError(w, http.StatusServiceUnavailable, "the portal is checking too many passwords at once; retry in 1 s")
	}
	return release
}

// logID names a new tenant's log: the public host and the tenant.
func (p *Portal) logID(tenant string) string {
	u, err := url.Parse(p.cfg.PublicURL)
	if err != nil || u.Host == "" {
		return tenant
	}
	return u.Host + "/" + tenant
}

func (p *Portal) handleRegister(w http.ResponseWriter, r *http.Request) {
	var q registerRequest
	if !decode(w, r, &q) {
		return
	}
	if err := q.validate(); err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	// Every well-formed attempt counts, taken names included (no probing for
	// accounts); a malformed one costs the server nothing and does not.
	if p.throttled(w, r, p.register, "registrations") {
		return
	}
	release := p.hashSlot(w, r)
	if release == nil {
		return
	}
	hash, err := hashPassword(q.Password, p.cfg.Scrypt)
	release()
	if err != nil {
		p.fail(w, r, err)
		return
	}
	token, tok, t, err := p.createAccount(r.Context(), q, hash)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	if err := p.newSession(r.Context(), w, q.Email); err != nil {
		p.fail(w, r, err)
		return
	}
	p.log.Info("portal registration", "tenant", t.ID, "token", tok.TokenHash)
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{
		"tenant": t.ID, "logId": t.LogID, "plan": t.Plan, "token": token, "tokenHash": tok.TokenHash,
		"welcome": admin.Welcome(p.cfg.PublicURL, t.ID, token), "exportCommand": p.exportCommand(t.ID),
	})
}

var errEmailTaken = errors.New("this email already has an account; log in instead")

// createAccount records the account and creates its tenant and first token through
// the administrative events, in one database transaction: when the tenant is taken
// the account is not kept.
func (p *Portal) createAccount(ctx context.Context, q registerRequest, hash string) (string, tenancy.Token, tenancy.Tenant, error) {
	var (
		token string
		tok   tenancy.Token
		t     tenancy.Tenant
	)
	tx, err := p.cfg.Store.Pool.Begin(ctx)
	if err != nil {
		return "", tok, t, err
	}
	defer tx.Rollback(context.Background())
	tag, err := tx.Exec(ctx, `INSERT INTO portal_accounts (email, tenant_id, password_hash) VALUES ($1, $2, $3) ON CONFLICT (email) DO NOTHING`, q.Email, q.Tenant, hash)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return "", tok, t, tenantTaken(q.Tenant)
	}
	if err != nil {
		return "", tok, t, err
	}
	if tag.RowsAffected() == 0 {
		return "", tok, t, conflict(errEmailTaken)
	}
	actor := actorOf(q.Email)
	if t, err = p.cfg.Admin.AddTenant(ctx, actor, q.Tenant, p.logID(q.Tenant)); err != nil {
		if errors.Is(err, tenancy.ErrTenantExists) {
			return "", tok, t, tenantTaken(q.Tenant)
		}
		return "", tok, t, err
	}
	if token, tok, err = p.cfg.Admin.AddToken(ctx, actor, q.Tenant, "portal"); err != nil {
		return "", tok, t, err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", tok, t, err
	}
	return token, tok, t, nil
}

func tenantTaken(id string) error {
	return conflict(errors.New("tenant " + id + " is taken; choose another name"))
}

// conflict marks err as a 409.
func conflict(err error) error { return &statusError{status: http.StatusConflict, err: err} }

type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

func (p *Portal) handleLogin(w http.ResponseWriter, r *http.Request) {
	if p.throttled(w, r, p.login, "login attempts") {
		return
	}
	var q loginRequest
	if !decode(w, r, &q) {
		return
	}
	email := strings.ToLower(strings.TrimSpace(q.Email))
	var stored string
	err := p.cfg.Store.Pool.QueryRow(r.Context(), `SELECT password_hash FROM portal_accounts WHERE email = $1`, email).Scan(&stored)
	known := err == nil
	if !known {
		// An unknown email costs the same scrypt as a wrong password.
		stored = p.dummy()
	}
	release := p.hashSlot(w, r)
	if release == nil {
		return
	}
	ok, herr := checkPassword(q.Password, stored)
	release()
	if herr != nil {
		p.fail(w, r, herr)
		return
	}
	if !known || !ok || len(q.Password) > MaxPassword {
		p.log.Info("portal login refused", "addr", httplimits.ClientAddr(r, p.cfg.TrustProxy))
		httpjson.WriteError(w, http.StatusUnauthorized, "wrong email or password")
		return
	}
	if err := p.newSession(r.Context(), w, email); err != nil {
		p.fail(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"email": email})
}

func (p *Portal) handleLogout(w http.ResponseWriter, r *http.Request, a account) {
	if _, ok := readBody(w, r, MaxBody); !ok {
		return
	}
	if _, err := p.cfg.Store.Pool.Exec(r.Context(), `DELETE FROM portal_sessions WHERE id_hash = $1`, a.idHash); err != nil {
		p.fail(w, r, err)
		return
	}
	p.clearCookie(w)
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"ok": true})
}

// tenant returns the account's tenant as the view holds it after catching up.
func (p *Portal) tenant(ctx context.Context, a account) (tenancy.Tenant, error) {
	if err := p.cfg.View.CatchUp(ctx, p.cfg.JS, a.Tenant); err != nil {
		return tenancy.Tenant{}, err
	}
	t, ok := p.cfg.View.Tenant(a.Tenant)
	if !ok {
		return t, tenancy.ErrNoTenant
	}
	return t, nil
}

// quota is a plan's allowance, nil for none (enterprise).
func quota(plan string) *uint64 {
	if n, ok := tenancy.Allowance(plan); ok {
		return &n
	}
	return nil
}

func (p *Portal) handleMe(w http.ResponseWriter, r *http.Request, a account) {
	t, err := p.tenant(r.Context(), a)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	used, err := tenancy.MonthAppends(r.Context(), p.cfg.JS, t.ID, p.cfg.Now())
	if err != nil {
		p.fail(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{
		"email": a.Email, "tenant": t.ID, "logId": t.LogID, "plan": t.Plan, "used": used,
		"quota": quota(t.Plan), "disabled": t.Disabled, "billing": p.billing != nil,
	})
}

// keyJSON is one key of /api/keys and the overview.
type keyJSON struct {
	Label     string  `json:"label"`
	Hash      string  `json:"hash"`
	CreatedAt string  `json:"createdAt"`
	RevokedAt *string `json:"revokedAt"`
}

func keysOf(t tenancy.Tenant) []keyJSON {
	keys := make([]keyJSON, 0, len(t.Tokens))
	for _, k := range t.Tokens {
		kj := keyJSON{Label: k.Label, Hash: k.TokenHash, CreatedAt: k.CreatedAt}
		if k.RevokedAt != "" {
			rev := k.RevokedAt
			kj.RevokedAt = &rev
		}
		keys = append(keys, kj)
	}
	return keys
}

func (p *Portal) handleKeys(w http.ResponseWriter, r *http.Request, a account) {
	t, err := p.tenant(r.Context(), a)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"keys": keysOf(t)})
}

func (p *Portal) handleAddKey(w http.ResponseWriter, r *http.Request, a account) {
	var q keyRequest
	if !decode(w, r, &q) {
		return
	}
	q.Label = strings.TrimSpace(q.Label)
	if q.Label == "" || len(q.Label) > tenancy.MaxLabel {
		httpjson.WriteError(w, http.StatusBadRequest, "label: give 1 to 200 characters naming where the key is used")
		return
	}
	if ok, wait := p.keys.allow(a.Tenant, p.cfg.Now()); !ok {
		secs := int(wait.Seconds()) + 1
		w.Header().Set("Retry-After", itoa(secs))
		httpjson.WriteError(w, http.StatusTooManyRequests, "too many API keys created for this tenant; retry in "+itoa(secs)+" s")
		return
	}
	token, tok, err := p.cfg.Admin.AddToken(r.Context(), actorOf(a.Email), a.Tenant, q.Label)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"token": token, "tokenHash": tok.TokenHash, "label": tok.Label})
}

func (p *Portal) handleRevoke(w http.ResponseWriter, r *http.Request, a account) {
	var q emptyRequest
	if !decode(w, r, &q) {
		return
	}
	n, err := p.cfg.Admin.RevokeToken(r.Context(), actorOf(a.Email), a.Tenant, r.PathValue("prefix"))
	if err != nil {
		p.fail(w, r, err)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"revoked": n})
}
