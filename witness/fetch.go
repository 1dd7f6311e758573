package witness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// FetchTimeout bounds every outbound fetch (SPEC.md, Limits).
const FetchTimeout = 10 * time.Second

// HTTPError is a fetch answered with a status other than 200.
type HTTPError struct {
	URL    string
	Status int
	Body   string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("GET %s: %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), e.Body)
}

// Fetch GETs u with FetchTimeout and returns the body of a 200 answer, refusing one
// larger than limit bytes. Other statuses are an *HTTPError.
func Fetch(ctx context.Context, client *http.Client, u string, limit int64) ([]byte, error) {
	if client == nil {
		client = &http.Client{Timeout: FetchTimeout}
	}
	ctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		b := strings.TrimSpace(string(body))
		if len(b) > 300 {
			b = b[:300] + "…"
		}
		return nil, &HTTPError{URL: u, Status: resp.StatusCode, Body: b}
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("GET %s: answer larger than %d bytes", u, limit)
	}
	return body, nil
}

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
