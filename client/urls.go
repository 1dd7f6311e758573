package client

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"svc.dev/svc/receipt"
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

// MaxLogIDLen caps a log id (it is signed into every head).
const MaxLogIDLen = 200

// CheckLogID refuses a log id that cannot be signed into heads as it is: over
// MaxLogIDLen bytes, not UTF-8, or holding a control or other non-printing character
// (a newline would forge lines of a signed note), or starting with
// receipt.DefaultLogIDPrefix. Empty is allowed (the default log id).
func CheckLogID(id string) error {
	if len(id) > MaxLogIDLen {
		return fmt.Errorf("logId of %d characters; at most %d", len(id), MaxLogIDLen)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("logId %q is not UTF-8", id)
	}
	for i, r := range id {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("logId %q has a control or non-printing character (%U) at byte %d; use printable characters, e.g. log.example.com/acme", id, r, i)
		}
	}
	// The signer keys its append-only state by log id, beside two other kinds of key
	// (signer/remote: "tenant:<t>", a head that named no log before log ids were
	// defaulted, and "c2sp-checkpoint:<origin>", a tenant's chain of C2SP notes): a log
	// id shaped like those would share their state.
	for _, kept := range []string{"tenant:", "c2sp-checkpoint:"} {
		if strings.HasPrefix(id, kept) {
			return fmt.Errorf("logId %q: the prefix %s is kept for the signer's own state; use another name, e.g. log.example.com/acme", id, kept)
		}
	}
	if strings.HasPrefix(id, receipt.DefaultLogIDPrefix) {
		return fmt.Errorf("logId %q: the prefix %s is kept for the default log ids (%s<tenant>, what a tenant without a logId gets); leave logId empty for that, or use another name, e.g. log.example.com/acme", id, receipt.DefaultLogIDPrefix, receipt.DefaultLogIDPrefix)
	}
	return nil
}
