package portal

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"svc.dev/svc/httpjson"
)

// CookieName is the session cookie: "<id>.<mac>", both base64url, where mac is
// HMAC-SHA256 of the id under the portal secret. The database holds only the
// SHA-256 of the id, and a session lives as long as its row.
const CookieName = "svc_portal_session"

var b64url = base64.RawURLEncoding

func (p *Portal) mac(id []byte) []byte {
	m := hmac.New(sha256.New, p.cfg.Secret)
	m.Write([]byte("svc portal session\x00"))
	m.Write(id)
	return m.Sum(nil)
}

func idHash(id []byte) string {
	h := sha256.Sum256(id)
	return hex.EncodeToString(h[:])
}

// newSession records a session for email and sets its cookie on w.
func (p *Portal) newSession(ctx context.Context, w http.ResponseWriter, email string) error {
	var id [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	now := p.cfg.Now()
	exp := now.Add(p.cfg.SessionTTL)
	// The account's expired sessions go when it gets a new one.
	if _, err := p.cfg.Store.Pool.Exec(ctx, `DELETE FROM portal_sessions WHERE email = $1 AND expires_at <= $2`, email, now); err != nil {
		return err
	}
	if _, err := p.cfg.Store.Pool.Exec(ctx, `INSERT INTO portal_sessions (id_hash, email, expires_at) VALUES ($1, $2, $3)`, idHash(id[:]), email, exp); err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: b64url.EncodeToString(id[:]) + "." + b64url.EncodeToString(p.mac(id[:])),
		Path: "/", Expires: exp, MaxAge: int(p.cfg.SessionTTL / time.Second),
		HttpOnly: true, Secure: p.secure, SameSite: http.SameSiteStrictMode,
	})
	return nil
}

func (p *Portal) clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: p.secure, SameSite: http.SameSiteStrictMode})
}

// cookieID checks the cookie's MAC and returns the session id.
func (p *Portal) cookieID(value string) ([]byte, bool) {
	a, b, ok := strings.Cut(value, ".")
	if !ok || len(value) > 200 {
		return nil, false
	}
	id, err1 := b64url.DecodeString(a)
	mac, err2 := b64url.DecodeString(b)
	if err1 != nil || err2 != nil || len(id) != 32 {
		return nil, false
	}
	return id, hmac.Equal(mac, p.mac(id))
}

// account is a logged-in portal user.
type account struct {
	Email    string
	Tenant   string
	Customer string // billing customer id, "" until known
	Billing  string // billing status, "" when none
	idHash   string
}

var errNoSession = errors.New("no live session")

// lookup returns the account of a live session.
func (p *Portal) lookup(ctx context.Context, id []byte) (account, error) {
	a := account{idHash: idHash(id)}
	var cust, status *string
	err := p.cfg.Store.Pool.QueryRow(ctx, `SELECT a.email, a.tenant_id, a.billing_customer, a.billing_status
		FROM portal_sessions s JOIN portal_accounts a ON a.email = s.email
		WHERE s.id_hash = $1 AND s.expires_at > $2`, a.idHash, p.cfg.Now()).Scan(&a.Email, &a.Tenant, &cust, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, errNoSession
	}
	if cust != nil {
		a.Customer = *cust
	}
	if status != nil {
		a.Billing = *status
	}
	return a, err
}

type sessionHandler func(http.ResponseWriter, *http.Request, account)

// session checks the session cookie before the body is read: a missing, forged,
// expired or logged-out session gets 401.
func (p *Portal) session(f sessionHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(CookieName)
		if err != nil {
			httpjson.WriteError(w, http.StatusUnauthorized, "not logged in")
			return
		}
		id, ok := p.cookieID(c.Value)
		if !ok {
			p.clearCookie(w)
			httpjson.WriteError(w, http.StatusUnauthorized, "not logged in")
			return
		}
		a, err := p.lookup(r.Context(), id)
		if errors.Is(err, errNoSession) {
			p.clearCookie(w)
			httpjson.WriteError(w, http.StatusUnauthorized, "session ended; log in again")
			return
		}
		if err != nil {
			p.fail(w, r, err)
			return
		}
		f(w, r, a)
	})
}
