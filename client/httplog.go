package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
)

// HTTPLog is a receipt.Log that appends to a log server over HTTP (SPEC.md, "Log
// server: append"): POST {leaf} or, hash-only, {leafHash} to the tenant's append URL
// with an optional bearer token. A 429, a 5xx, a timeout or a transport failure is
// retried three times with backoff, then the call fails; other statuses fail at once.
// Errors wrap receipt.ErrLogRefused (4xx) or receipt.ErrLogUnavailable (the rest).
type HTTPLog struct {
	url      string
	token    string
	hashOnly bool
	timeout  time.Duration
	retries  int
	client   *http.Client
}

// HTTPLogConfig configures an HTTPLog.
type HTTPLogConfig struct {
	URL      string        // the tenant's append URL, e.g. https://log.example/t/acme/append
	Token    string        // bearer token; empty when the log takes appends without one
	HashOnly bool          // send only the leaf hash
	Timeout  time.Duration // one attempt; default 10 s (gateway config log.timeoutMs)
	Retries  int           // default 3; negative: none
	Client   *http.Client  // optional
}

// NewHTTPLog checks cfg and makes an HTTPLog.
func NewHTTPLog(cfg HTTPLogConfig) (*HTTPLog, error) {
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("log url %q: want http(s)://host/.../append", cfg.URL)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Retries == 0 {
		cfg.Retries = 3
	}
	if cfg.Retries < 0 {
		cfg.Retries = 0
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	return &HTTPLog{url: cfg.URL, token: cfg.Token, hashOnly: cfg.HashOnly, timeout: cfg.Timeout, retries: cfg.Retries, client: cfg.Client}, nil
}

// Append implements receipt.Log.
func (l *HTTPLog) Append(ctx context.Context, leaf []byte) (*receipt.Proof, error) {
	var body []byte
	if l.hashOnly {
		body = []byte(`{"leafHash":"` + merkle.LeafHash(leaf).String() + `"}`)
	} else {
		q, err := json.Marshal(string(leaf))
		if err != nil {
			return nil, err
		}
		body = append(append([]byte(`{"leaf":`), q...), '}')
	}
	var err error
	for attempt := 0; ; attempt++ {
		var p *receipt.Proof
		var retryAfter int
		p, retryAfter, err = l.once(ctx, body)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, receipt.ErrLogUnavailable) && !isTooMany(err) || attempt == l.retries || ctx.Err() != nil {
			return nil, err
		}
		if serr := Sleep(ctx, Backoff(attempt, retryAfter)); serr != nil {
			return nil, err
		}
	}
}

type tooMany struct{ error }

func (t tooMany) Unwrap() error { return t.error }

func isTooMany(err error) bool { var t tooMany; return errors.As(err, &t) }

func (l *HTTPLog) once(ctx context.Context, body []byte) (*receipt.Proof, int, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if l.token != "" {
		req.Header.Set("Authorization", "Bearer "+l.token)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s: %w", receipt.ErrLogUnavailable, l.url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s: %w", receipt.ErrLogUnavailable, l.url, err)
	}
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusOK {
		var e ErrorBody
		_ = json.Unmarshal(data, &e)
		if e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		msg := fmt.Sprintf("%s answered %d: %s", l.url, resp.StatusCode, e.Error)
		switch {
		case resp.StatusCode >= 500:
			return nil, ra, fmt.Errorf("%w: %s", receipt.ErrLogUnavailable, msg)
		case resp.StatusCode == http.StatusTooManyRequests:
			return nil, ra, tooMany{fmt.Errorf("%w: %s", receipt.ErrLogRefused, msg)}
		default:
			return nil, ra, fmt.Errorf("%w: %s", receipt.ErrLogRefused, msg)
		}
	}
	var p receipt.Proof
	if err := json.Unmarshal(data, &p); err != nil || p.TreeHead == nil {
		return nil, 0, fmt.Errorf("%w: %s: malformed answer", receipt.ErrLogUnavailable, l.url)
	}
	return &p, 0, nil
}

// ErrorBody is the JSON of an error answer, the same as the HTTP log server's.
type ErrorBody struct {
	Error string `json:"error"`
}
