package admin

import (
	"net/http"
	"net/url"
	"strings"

	"svc.dev/svc/httpjson"
)

// crossSite reports why r, a write, may come from another site's page: a browser
// that holds the operator's HTTP Basic credentials attaches them to any request a
// page makes, so writes refuse what a browser marks as cross-site (Sec-Fetch-Site)
// and an Origin other than this server's (its Host, or PublicURL's). Requests
// without these headers (curl, scripts, svc's clients) are not a browser's.
func (h *Handler) crossSite(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return "Sec-Fetch-Site: " + site
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return "Origin: " + origin
	}
	if strings.EqualFold(u.Host, r.Host) {
		return ""
	}
	if pu, err := url.Parse(h.cfg.PublicURL); err == nil && pu.Host != "" && strings.EqualFold(u.Host, pu.Host) {
		return ""
	}
	return "Origin: " + origin
}

// write guards an admin write: refused with 403 when it may come from another
// site's page, and, for a JSON route, with 415 when its body is not JSON (a page
// cannot send application/json across sites without a preflight, which svc never
// allows). A route without a body refuses a body of another type as well.
func (h *Handler) write(f func(http.ResponseWriter, *http.Request, string), jsonBody bool) func(http.ResponseWriter, *http.Request, string) {
	return func(w http.ResponseWriter, r *http.Request, actor string) {
		if why := h.crossSite(r); why != "" {
			h.log.Warn("cross-site admin write refused", "path", r.URL.Path, "why", why)
			httpjson.WriteError(w, http.StatusForbidden, "cross-site admin request refused ("+why+"); the admin API takes requests from this server's own pages and from API clients")
			return
		}
		hasType := r.Header.Get("Content-Type") != ""
		if (jsonBody || hasType || r.ContentLength > 0) && httpjson.RefuseNonJSON(w, r) {
			return
		}
		f(w, r, actor)
	}
}
