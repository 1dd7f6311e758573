package admin

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"net/http"
	"net/url"

	"svc.dev/svc/client"
	"svc.dev/svc/httpjson"
	"svc.dev/svc/internal/tenancy"
)

//go:embed templates/page.html
var templates embed.FS

var pageTmpl = template.Must(template.ParseFS(templates, "templates/page.html"))

// pageTenant is one row of the operator page.
type pageTenant struct {
	tenancy.Tenant
	Appends, Leaves uint64
	Quota           uint64 // 0: no allowance
	Over            bool
	Checkpoint      *client.CheckpointFile
}

type newToken struct{ Tenant, Token, Hash, Welcome string }

type pageData struct {
	Actor, Month, PublicURL, KeyID, CSRF string
	Error, Notice                        string
	NewToken                             *newToken
	Tenants                              []pageTenant
	Plans                                []string
	Audit                                []client.AuditEntry
	tokenTenant                          map[string]string
}

// TenantOf names the tenant of a token row (the template's revoke form).
func (d *pageData) TenantOf(t tenancy.Token) string { return d.tokenTenant[t.Hash] }

// csrf is the value every form of the page carries: an HMAC of the admin token's
// hash, which a page on another site cannot know, so a browser holding the Basic
// credentials cannot be made to post actions from elsewhere.
func (h *Handler) csrf() string {
	m := hmac.New(sha256.New, h.token[:])
	m.Write([]byte("svc admin page"))
	return hex.EncodeToString(m.Sum(nil))
}

func (h *Handler) page(w http.ResponseWriter, r *http.Request, actor string) {
	h.render(w, r, actor, pageData{})
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, actor string, d pageData) {
	ctx := r.Context()
	d.Actor, d.PublicURL, d.KeyID, d.CSRF = actor, h.cfg.PublicURL, h.cfg.KeyID, h.csrf()
	d.Month = h.cfg.Now().UTC().Format("2006-01")
	d.Plans = []string{tenancy.PlanFree, tenancy.PlanTeam, tenancy.PlanEnterprise}
	d.tokenTenant = map[string]string{}
	lines, err := h.usageLines(ctx, d.Month)
	if err != nil {
		d.Error = "usage unavailable: " + err.Error()
	}
	byTenant := map[string]usageLine{}
	for _, l := range lines {
		byTenant[l.Tenant] = l
	}
	for _, t := range h.cfg.View.Tenants() {
		u := byTenant[t.ID]
		row := pageTenant{Tenant: t, Appends: u.Appends, Leaves: u.TotalLeaves}
		if q, ok := tenancy.Allowance(t.Plan); ok {
			row.Quota, row.Over = q, u.Appends >= q
		}
		row.Checkpoint, _ = h.cfg.Store.LatestCheckpoint(ctx, t.ID)
		for _, k := range t.Tokens {
			d.tokenTenant[k.Hash] = t.ID
		}
		d.Tenants = append(d.Tenants, row)
	}
	if evs, err := h.cfg.Store.Audit(ctx, "", 20); err == nil {
		for _, e := range evs {
			d.Audit = append(d.Audit, e.AuditEntry)
		}
	}
	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, &d); err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Frame-Options", "DENY")
	_, _ = w.Write(buf.Bytes())
}

// pageAction performs a form of the page (POST /admin/page, form-encoded, field
// action: add, disable, plan, token, revoke) and renders the page with the outcome.
func (h *Handler) pageAction(w http.ResponseWriter, r *http.Request, actor string) {
	if why := h.crossSite(r); why != "" {
		httpjson.WriteError(w, http.StatusForbidden, "cross-site admin request refused ("+why+"); use the page at /admin itself")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	if err := r.ParseForm(); err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, "form: "+err.Error())
		return
	}
	if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(h.csrf())) {
		httpjson.WriteError(w, http.StatusForbidden, "the form does not come from this page (missing or wrong csrf field); reload /admin")
		return
	}
	d, err := h.act(r.Context(), actor, r.PostForm)
	if err != nil {
		d.Error = err.Error()
		w.WriteHeader(statusOf(err))
	}
	h.render(w, r, actor, d)
}

func (h *Handler) act(ctx context.Context, actor string, f url.Values) (pageData, error) {
	var d pageData
	tenant := f.Get("tenant")
	switch f.Get("action") {
	case "add":
		t, err := h.cfg.Admin.AddTenant(ctx, actor, f.Get("id"), f.Get("logId"))
		if err != nil {
			return d, err
		}
		d.Notice = "tenant " + t.ID + " added on plan " + t.Plan
	case "disable":
		if _, err := h.cfg.Admin.DisableTenant(ctx, actor, tenant); err != nil {
			return d, err
		}
		d.Notice = "tenant " + tenant + " disabled"
	case "plan":
		t, err := h.cfg.Admin.SetPlan(ctx, actor, tenant, f.Get("plan"))
		if err != nil {
			return d, err
		}
		d.Notice = "tenant " + t.ID + " is on plan " + t.Plan
	case "token":
		token, tok, err := h.cfg.Admin.AddToken(ctx, actor, tenant, f.Get("label"))
		if err != nil {
			return d, err
		}
		d.NewToken = &newToken{Tenant: tenant, Token: token, Hash: tok.TokenHash, Welcome: Welcome(h.cfg.PublicURL, tenant, token)}
	case "revoke":
		if _, err := h.cfg.Admin.RevokeToken(ctx, actor, tenant, f.Get("prefix")); err != nil {
			return d, err
		}
		d.Notice = "token " + f.Get("prefix") + " of " + tenant + " revoked"
	default:
		return d, tenancy.ErrInvalid
	}
	return d, nil
}
