package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/client"
	"svc.dev/svc/receipt"
)

// Client sends append requests over NATS and waits for the sequencer's answer. One
// Client serves any number of goroutines over one reply subscription.
type Client struct {
	nc      *nats.Conn
	timeout time.Duration
	retries int
	header  func(context.Context, nats.Header)
	prefix  string
	sub     *nats.Subscription
	next    atomic.Uint64

	mu      sync.Mutex
	waiting map[string]chan *nats.Msg
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// Timeout is how long one attempt may take; default 10 s (SPEC.md: log.timeoutMs).
	// A timeout counts as unreachable and is retried like a server error.
	Timeout time.Duration
	// Retries is how often a 429, a 5xx or a timeout is retried with backoff; SPEC.md
	// says three. Negative means none (the HTTP front, whose own client retries).
	Retries int
	// Header, when set, adds headers to each request from its context (the log
	// service: the W3C trace context, internal/telemetry.InjectNATS).
	Header func(ctx context.Context, h nats.Header)
}

// NewClient subscribes to a private reply subject on nc.
func NewClient(nc *nats.Conn, cfg ClientConfig) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Retries == 0 {
		cfg.Retries = 3
	}
	if cfg.Retries < 0 {
		cfg.Retries = 0
	}
	c := &Client{nc: nc, timeout: cfg.Timeout, retries: cfg.Retries, header: cfg.Header, prefix: nats.NewInbox() + ".", waiting: map[string]chan *nats.Msg{}}
	sub, err := nc.Subscribe(c.prefix+"*", func(m *nats.Msg) {
		c.mu.Lock()
		ch, ok := c.waiting[m.Subject]
		delete(c.waiting, m.Subject)
		c.mu.Unlock()
		if ok {
			ch <- m
		}
	})
	if err != nil {
		return nil, err
	}
	sub.SetPendingLimits(-1, -1)
	c.sub = sub
	return c, nil
}

// Close drops the reply subscription.
func (c *Client) Close() error { return c.sub.Unsubscribe() }

// Do sends one append request and waits for its answer, at most Timeout: the proof,
// or a *Refusal (a timeout or a transport failure is one for ErrUnavailable).
func (c *Client) Do(ctx context.Context, tenant string, l Leaf) (*receipt.Proof, error) {
	body, err := c.DoRaw(ctx, tenant, l)
	if err != nil {
		return nil, err
	}
	var p receipt.Proof
	if err := json.Unmarshal(body, &p); err != nil || p.TreeHead == nil {
		return nil, Refuse(ErrUnavailable, 0, "log unavailable: malformed answer: %v", err)
	}
	return &p, nil
}

// DoRaw is Do returning the answer's JSON ({inclusion, treeHead}) undecoded, for the
// HTTP front, which passes it on as its own answer.
func (c *Client) DoRaw(ctx context.Context, tenant string, l Leaf) ([]byte, error) {
	inbox := fmt.Sprintf("%s%d", c.prefix, c.next.Add(1))
	ch := make(chan *nats.Msg, 1)
	c.mu.Lock()
	c.waiting[inbox] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, inbox)
		c.mu.Unlock()
	}()
	m := NewRequest(tenant, l, inbox)
	if c.header != nil {
		c.header(ctx, m.Header)
	}
	if err := c.nc.PublishMsg(m); err != nil {
		return nil, Unavailable(err)
	}
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, Unavailable(ctx.Err())
	case <-t.C:
		return nil, Refuse(ErrUnavailable, 0, "log unavailable: no answer within %s", c.timeout)
	case m := <-ch:
		if m.Header.Get(HeaderStatus) == StatusOK {
			return m.Data, nil
		}
		r, err := DecodeReply(m)
		if err != nil {
			return nil, Unavailable(err)
		}
		if r.Refusal == nil {
			return nil, Refuse(ErrUnavailable, 0, "log unavailable: an answer without a proof")
		}
		return nil, r.Refusal
	}
}

// Append is Do with SPEC.md's retry contract: a 429, a 5xx or a timeout is retried
// three times with exponential backoff and jitter, then the call fails. Other
// statuses fail at once.
func (c *Client) Append(ctx context.Context, tenant string, l Leaf) (*receipt.Proof, error) {
	var err error
	for attempt := 0; ; attempt++ {
		var p *receipt.Proof
		if p, err = c.Do(ctx, tenant, l); err == nil {
			return p, nil
		}
		var ref *Refusal
		if !errors.As(err, &ref) || !Retryable(ref) || attempt == c.retries || ctx.Err() != nil {
			return nil, err
		}
		if err := client.Sleep(ctx, client.Backoff(attempt, ref.RetryAfter)); err != nil {
			return nil, err
		}
	}
}

// Log is a receipt.Log that appends to a tenant's log over NATS: what gateways and
// sidecars in a fleet use instead of HTTP.
type Log struct {
	Client   *Client
	Tenant   string
	HashOnly bool // send only the leaf hash
}

// Append implements receipt.Log.
func (l *Log) Append(ctx context.Context, leaf []byte) (*receipt.Proof, error) {
	lf := NewLeaf(leaf)
	if l.HashOnly {
		lf.Data = nil
	}
	return l.Client.Append(ctx, l.Tenant, lf)
}
