package portal

import (
	"net/http"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/httpjson"
	"svc.dev/svc/internal/admin"
	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/merkle"
)

// MonthsShown is how many calendar months the overview's usage chart covers.
const MonthsShown = 6

// AuditShown caps the audit entries of the overview.
const AuditShown = 50

type monthJSON struct {
	Month   string `json:"month"`
	Appends uint64 `json:"appends"`
}

type checkpointJSON struct {
	TreeSize uint64 `json:"treeSize"`
	SignedAt string `json:"signedAt"`
}

// lastMonths lists the n months up to the one of now, oldest first, as YYYY-MM.
func lastMonths(now time.Time, n int) []string {
	now = now.UTC()
	first := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	out := make([]string, n)
	for i := range n {
		out[n-1-i] = first.AddDate(0, -i, 0).Format("2006-01")
	}
	return out
}

// exportCommand is the command line that exports tenant's log, with its token in
// the environment variable SVC_LOG_TOKEN (the one the welcome and a gateway's config name).
func (p *Portal) exportCommand(tenant string) string {
	return p.cfg.SvcCommand + " log-export --log-url " + p.cfg.PublicURL + " --tenant " + tenant + " --token-env SVC_LOG_TOKEN --out " + tenant + "-export"
}

// urls are where a tenant's log, key document and checkpoints are.
func (p *Portal) urls(tenant string) map[string]string {
	cps := client.TenantBase(p.cfg.PublicURL, tenant) + "/checkpoints"
	if p.cfg.CheckpointsURL != "" {
		cps = p.cfg.CheckpointsURL + "/" + tenant + "/"
	}
	return map[string]string{
		"log":         client.TenantBase(p.cfg.PublicURL, tenant) + "/head", // a page that opens: the signed head
		"keys":        client.KeyDocumentURL(p.cfg.PublicURL, tenant),
		"checkpoints": cps,
	}
}

// head reads the tenant's tree size and root from the log's public routes (the
// current head); when the log does not answer from here, the latest checkpoint's
// size and root (older, but a pair the log signed), and with none 0 and "".
func (p *Portal) head(tenant string, cp *client.CheckpointFile) (uint64, string) {
	ls := &client.LogServer{Base: client.TenantBase(p.cfg.LogURL, tenant), Client: p.logClient}
	size, err := ls.Size()
	var root string
	if err == nil {
		var h merkle.Hash
		if h, err = ls.RootAt(size); err == nil {
			root = h.String()
		}
	}
	if err != nil {
		p.log.Warn("portal: the log's head is unavailable; showing the latest checkpoint", "tenant", tenant, "err", err)
		if cp == nil {
			return 0, ""
		}
		return cp.TreeSize, cp.RootHash
	}
	return size, root
}

func (p *Portal) handleOverview(w http.ResponseWriter, r *http.Request, a account) {
	ctx := r.Context()
	t, err := p.tenant(ctx, a)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	now := p.cfg.Now()
	used, err := tenancy.MonthAppends(ctx, p.cfg.JS, t.ID, now)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	var months []monthJSON
	for _, m := range lastMonths(now, MonthsShown) {
		n, _, err := p.cfg.Store.Usage(ctx, t.ID, m)
		if err != nil {
			p.fail(w, r, err)
			return
		}
		months = append(months, monthJSON{Month: m, Appends: n})
	}
	// This month's count is the broker's (exact); the projection may lag behind it.
	months[len(months)-1].Appends = max(months[len(months)-1].Appends, used)
	var latest *checkpointJSON
	cp, err := p.cfg.Store.LatestCheckpoint(ctx, t.ID)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	size, root := p.head(t.ID, cp)
	if cp != nil {
		latest = &checkpointJSON{TreeSize: cp.TreeSize, SignedAt: cp.SignedAt}
	}
	audit, err := p.cfg.Store.Audit(ctx, t.ID, AuditShown)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	var bill map[string]string
	if a.Billing != "" {
		bill = map[string]string{"status": a.Billing}
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{
		"tenant": t.ID, "logId": t.LogID, "plan": t.Plan, "used": used, "quota": quota(t.Plan),
		"treeSize": size, "rootHash": root, "latestCheckpoint": latest, "months": months,
		"keys": keysOf(t), "audit": auditJSON(audit), "billing": bill, "urls": p.urls(t.ID),
		"exportCommand": p.exportCommand(t.ID), "welcome": admin.Welcome(p.cfg.PublicURL, t.ID, ""),
		"stripe": p.billing != nil,
	})
}

// auditJSON is the audit entries of SPEC.md ({ id, at, actor, action, tenantId,
// detail }), without the fold's fields of the events.
func auditJSON(evs []tenancy.Event) []client.AuditEntry {
	out := make([]client.AuditEntry, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.AuditEntry)
	}
	return out
}
