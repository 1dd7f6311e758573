package client

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// CheckBaseURL checks that base is an http(s) URL and returns it without a trailing
// slash.
func CheckBaseURL(flag, base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%s %q: want http(s)://host[:port][/path]", flag, base)
	}
	return strings.TrimRight(base, "/"), nil
}

// TenantBase is where a tenant's public log routes are: the log URL itself for the
// default tenant, <log-url>/t/<tenant> for the others.
func TenantBase(logURL, tenant string) string {
	if tenant == DefaultTenant {
		return logURL
	}
	return logURL + "/t/" + url.PathEscape(tenant)
}

// KeyDocumentURL is the tenant's published key document.
func KeyDocumentURL(logURL, tenant string) string {
	return TenantBase(logURL, tenant) + "/.well-known/svc-log.json"
}

// DefaultTenant is the tenant served at the log's root.
const DefaultTenant = "default"

var tenantRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidTenant reports whether id can name a tenant (and a subject token): 1 to 63
// characters of a-z, 0-9, '-' and '_', starting with a letter or digit. Self-registered
// tenants are stricter (3 to 40 of a-z, 0-9, '-'); that is the portal's check.
func ValidTenant(id string) bool { return tenantRE.MatchString(id) }
