package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Errors of the client; test with errors.Is. Unreachable signers, timeouts and 5xx
// answers wrap receipt.ErrLogUnavailable instead.
var (
	// ErrTokenRefused: the signer answered 401 to the token.
	ErrTokenRefused = errors.New("signer refused the token")
	// ErrRefused: the signer answered 4xx other than 401 (it would not sign this request).
	ErrRefused = errors.New("signer refused the request")
	// ErrBadResponse: the signer's answer is malformed, or its envelope is not exactly
	// the payload sent signed by the signer's key.
	ErrBadResponse = errors.New("signer's answer does not verify")
	// ErrClockSkew: the signer's clock (the Date of its answer) and this host's differ
	// by more than the tolerance (WithMaxSkew). It also wraps receipt.ErrLogUnavailable:
	// the log hands out no head (503) until one of the clocks is fixed.
	ErrClockSkew = errors.New("signer's clock disagrees with this host's")
)

// DefaultMaxSkew is how far the signer's clock may be from the log's before the
// client refuses its answers. Heads carry the log's clock as their timestamp; a
// signer a minute away means one of the two hosts keeps the wrong time, and the log
// cannot tell which, so it signs nothing rather than hand out heads whose time may be
// wrong (docs/design/cluster.md, "The signer's clock skewed").
const DefaultMaxSkew = time.Minute

// maxResponse caps what the client reads of an answer: an envelope of a body under
// MaxSignBody, or a key document.
const maxResponse = 4 << 20

// Option configures a Client.
type Option func(*clientOptions)

type clientOptions struct {
	timeout time.Duration
	hc      *http.Client
	keyID   string
	maxSkew time.Duration
}

// WithTimeout bounds each request to the signer (default DefaultTimeout, 10 s).
func WithTimeout(d time.Duration) Option { return func(o *clientOptions) { o.timeout = d } }

// WithHTTPClient sets the HTTP client (TLS settings, a proxy). Redirects are never
// followed whatever the client's policy, so the token only goes to the address given.
func WithHTTPClient(hc *http.Client) Option { return func(o *clientOptions) { o.hc = hc } }

// WithMaxSkew sets how far the signer's clock (the Date header of its answers) may be
// from this host's before an answer is refused with ErrClockSkew; default
// DefaultMaxSkew. The Date header has one-second resolution, so a second is added.
func WithMaxSkew(d time.Duration) Option { return func(o *clientOptions) { o.maxSkew = d } }

// WithKeyID pins the signer's key: NewClient fails unless the signer's current key has
// this keyid. Without it, the client trusts the key the signer names at start-up.
func WithKeyID(keyID string) Option { return func(o *clientOptions) { o.keyID = keyID } }

// Client signs tree heads through a signer service. It implements
// receipt.EnvelopeSigner and is safe for concurrent use.
type Client struct {
	base    string // scheme://host[:port][/prefix], no trailing slash
	token   string
	hc      *http.Client
	timeout time.Duration
	maxSkew time.Duration
	key     signer.PublicKey
	heads   heads // the last head signed per log, as far as this client knows
}

var _ receipt.EnvelopeSigner = (*Client)(nil)

// NewClient checks baseURL, fetches GET /keys once and learns the signer's current
// key, which every signature must then verify against.
func NewClient(ctx context.Context, baseURL, token string, opts ...Option) (*Client, error) {
	o := clientOptions{timeout: DefaultTimeout, maxSkew: DefaultMaxSkew}
	for _, opt := range opts {
		opt(&o)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("signer client: timeout %v must be positive", o.timeout)
	}
	if o.maxSkew <= 0 {
		return nil, fmt.Errorf("signer client: clock skew tolerance %v must be positive", o.maxSkew)
	}
	base, err := checkBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, errors.New("signer client: the signer token is empty")
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return nil, errors.New("signer client: the signer token contains whitespace")
	}
	var hc http.Client
	if o.hc != nil {
		hc = *o.hc
	} else {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil // the token goes straight to the signer, never through an environment proxy
		tr.MaxIdleConnsPerHost = 16
		tr.MaxConnsPerHost = 64 // within the signer's per-address share (256); more calls queue here
		hc.Transport = tr
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c := &Client{base: base, token: token, hc: &hc, timeout: o.timeout, maxSkew: o.maxSkew}

	doc, err := c.Keys(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := doc.PublicKeys()
	if err != nil {
		return nil, fmt.Errorf("%w: %s/keys: %w", ErrBadResponse, c.base, err)
	}
	c.key = keys[0]
	if o.keyID != "" && c.key.KeyID != o.keyID {
		return nil, fmt.Errorf("%w: the signer at %s signs with keyid %s, not the pinned %s", ErrBadResponse, c.base, c.key.KeyID, o.keyID)
	}
	return c, nil
}

func checkBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("signer client: signer address %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("signer client: signer address %q must be an http:// or https:// URL", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("signer client: signer address %q has no host", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("signer client: signer address %q must not carry user info, a query or a fragment", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// KeyID is the id of the signer's current key, learned at NewClient.
func (c *Client) KeyID() string { return c.key.KeyID }

// PublicKey is the signer's current key, learned at NewClient.
func (c *Client) PublicKey() signer.PublicKey { return c.key }

// Keys fetches the signer's key document (GET /keys, no token) and checks it with
// signer.ParseKeyDocument.
func (c *Client) Keys(ctx context.Context) (*signer.KeyDocument, error) {
	body, err := c.do(ctx, http.MethodGet, "/keys", nil, false)
	if err != nil {
		return nil, err
	}
	doc, err := signer.ParseKeyDocument(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %s/keys: %w", ErrBadResponse, c.base, err)
	}
	return doc, nil
}

// Health asks GET /health and checks that the signer still signs with the key this
// client learned.
func (c *Client) Health(ctx context.Context) error {
	body, err := c.do(ctx, http.MethodGet, "/health", nil, false)
	if err != nil {
		return err
	}
	var h Health
	if err := json.Unmarshal(body, &h); err != nil || !h.OK {
		return fmt.Errorf("%w: %s/health answered %q", ErrBadResponse, c.base, truncate(body))
	}
	if h.KeyID != c.key.KeyID {
		return fmt.Errorf("%w: the signer at %s now signs with keyid %s, not %s (restart to learn a rotated key)", ErrBadResponse, c.base, h.KeyID, c.key.KeyID)
	}
	return nil
}

// SignEnvelope asks the signer to sign payload (POST /sign) and returns the envelope
// only after checking it: the same payload type and bytes, exactly one signature, by
// the key learned at NewClient, that verifies.
//
// The signer signs a tree head only if it extends the last head it signed for its log;
// SignEnvelope sends no consistency proof, so it signs a log's first head or the same
// head again. The log signs through SignHeadOf.
func (c *Client) SignEnvelope(ctx context.Context, payloadType string, payload []byte) (*receipt.Envelope, error) {
	return c.signRequest(ctx, &SignRequest{PayloadType: payloadType, Payload: payload})
}

// signRequest posts req to /sign and checks the envelope it gets back: the payload
// type and bytes sent, signed by the signer's key.
func (c *Client) signRequest(ctx context.Context, req *SignRequest) (*receipt.Envelope, error) {
	body, err := c.post(ctx, req)
	if err != nil {
		return nil, err
	}
	env, err := checkEnvelope(body, c.key, req.PayloadType)
	if err != nil {
		return nil, fmt.Errorf("%w: %s/sign: %w", ErrBadResponse, c.base, err)
	}
	if !bytes.Equal(env.Payload, req.Payload) {
		return nil, fmt.Errorf("%w: %s/sign returned a payload other than the one sent", ErrBadResponse, c.base)
	}
	return env, nil
}

// post sends req to /sign and returns the body of a 2xx answer.
func (c *Client) post(ctx context.Context, req *SignRequest) ([]byte, error) {
	reqBody, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if len(reqBody) > MaxSignBody {
		return nil, fmt.Errorf("%w: the sign request is %d bytes; the signer takes at most %d", ErrRefused, len(reqBody), MaxSignBody)
	}
	return c.do(ctx, http.MethodPost, "/sign", reqBody, true)
}

// checkEnvelope parses the signer's answer as an Envelope of payloadType with exactly
// one signature, by key, that verifies. The error says which check failed.
func checkEnvelope(body []byte, key signer.PublicKey, payloadType string) (*receipt.Envelope, error) {
	env, err := receipt.ParseEnvelope(body)
	if err != nil {
		return nil, err
	}
	switch {
	case env.PayloadType != payloadType:
		return nil, fmt.Errorf("payloadType %q, not the %q sent", env.PayloadType, payloadType)
	case len(env.Signatures) != 1:
		return nil, fmt.Errorf("%d signatures, want 1", len(env.Signatures))
	case env.Signatures[0].KeyID != key.KeyID:
		return nil, fmt.Errorf("signed with keyid %s, not the signer's key %s", env.Signatures[0].KeyID, key.KeyID)
	}
	if _, err := env.Verify([]signer.PublicKey{key}); err != nil {
		return nil, fmt.Errorf("the signature does not verify against keyid %s", key.KeyID)
	}
	return env, nil
}

// do sends one request and returns the body of a 2xx answer.
func (c *Client) do(ctx context.Context, method, path string, body []byte, auth bool) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	endpoint := c.base + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, endpoint, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if auth {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.unavailable(ctx, method, endpoint, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, c.unavailable(ctx, method, endpoint, err)
	}
	if len(data) > maxResponse {
		return nil, fmt.Errorf("%w: %s %s: answer over %d bytes", ErrBadResponse, method, endpoint, maxResponse)
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return data, c.checkClock(resp.Header.Get("Date"), method, endpoint)
	case code == http.StatusUnauthorized:
		return nil, fmt.Errorf("%w: %s %s answered 401; check the token the signer was started with", ErrTokenRefused, method, endpoint)
	case parseConflict(endpoint, code, data) != nil:
		return nil, parseConflict(endpoint, code, data)
	case code >= 500:
		return nil, fmt.Errorf("%w: signer %s %s answered %d: %s", receipt.ErrLogUnavailable, method, endpoint, code, errorText(data))
	case code >= 400:
		return nil, fmt.Errorf("%w: %s %s answered %d: %s", ErrRefused, method, endpoint, code, errorText(data))
	default:
		return nil, fmt.Errorf("%w: %s %s answered %d", ErrBadResponse, method, endpoint, code)
	}
}

// checkClock compares the signer's clock, the Date of its answer, with this host's.
// An answer without a Date header is not checked.
func (c *Client) checkClock(date, method, endpoint string) error {
	if date == "" {
		return nil
	}
	at, err := http.ParseTime(date)
	if err != nil {
		return fmt.Errorf("%w: %s %s: Date header %q: %w", ErrBadResponse, method, endpoint, truncate([]byte(date)), err)
	}
	skew := time.Until(at)
	if skew.Abs() <= c.maxSkew+time.Second {
		return nil
	}
	dir := "ahead of"
	if skew < 0 {
		dir = "behind"
	}
	return fmt.Errorf("%w: %w: %s %s: the signer's clock (Date %s) is %s %s this host's, more than the %s allowed; no head is signed until one of the clocks is fixed",
		receipt.ErrLogUnavailable, ErrClockSkew, method, endpoint, date, skew.Abs().Round(time.Second), dir, c.maxSkew)
}

// unavailable wraps a transport failure in receipt.ErrLogUnavailable, naming a timeout.
func (c *Client) unavailable(ctx context.Context, method, endpoint string, err error) error {
	var ne net.Error
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("%w: signer %s %s did not answer in time (client timeout %v): %w", receipt.ErrLogUnavailable, method, endpoint, c.timeout, err)
	}
	return fmt.Errorf("%w: signer %s %s: %w", receipt.ErrLogUnavailable, method, endpoint, err)
}

// errorText is the "error" of a JSON error body, or the body itself, shortened.
func errorText(data []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		return truncate([]byte(e.Error))
	}
	return truncate(bytes.TrimSpace(data))
}

func truncate(b []byte) string {
	const max = 300
	s := strings.ToValidUTF8(string(b), "?")
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
