package exporters

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Exporter delivers export records to one collector. Send makes one request for the
// whole batch; a nil error means the collector accepted it. An error that wraps
// ErrPermanent means that retrying the same request cannot succeed (the collector
// said the request itself is bad); any other error is retried.
type Exporter interface {
	Name() string // its kind's config field (Kinds): names its queue, its durable consumer and its stderr lines
	Send(ctx context.Context, recs []*Record) error
}

// ErrPermanent marks a refusal no retry can change.
var ErrPermanent = errors.New("refused for good")

// DefaultTimeout bounds one request to a collector (SPEC.md: outbound fetches time
// out at ten seconds).
const DefaultTimeout = 10 * time.Second

// post sends one JSON request and classifies the answer: 2xx is nil; 408, 429 and
// 5xx, 401, 403 and 404 are retried (the last three are configuration an operator can
// fix while the exports wait); other 4xx wrap ErrPermanent. It returns the answer's
// body (capped) on success.
func post(ctx context.Context, client *http.Client, timeout time.Duration, url string, header http.Header, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPermanent, err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		return data, nil
	}
	msg := fmt.Sprintf("%s answered %d: %s", url, resp.StatusCode, strings.TrimSpace(string(data)))
	switch {
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests,
		resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden, resp.StatusCode == http.StatusNotFound:
		return nil, errors.New(msg)
	default:
		return nil, fmt.Errorf("%w: %s", ErrPermanent, msg)
	}
}
