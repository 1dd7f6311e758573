package witness

import (
	"fmt"
	"net/url"
	"strings"

	"svc.dev/svc/conformance"
)

// FetchTimeout bounds every outbound fetch (SPEC.md, Limits).
const FetchTimeout = conformance.FetchTimeout

// HTTPError is a fetch answered with a status other than 200.
type HTTPError = conformance.HTTPError

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
	if tenant == "default" {
		return logURL
	}
	return logURL + "/t/" + url.PathEscape(tenant)
}

// KeyDocumentURL is the tenant's published key document.
func KeyDocumentURL(logURL, tenant string) string {
	return TenantBase(logURL, tenant) + "/.well-known/svc-log.json"
}
