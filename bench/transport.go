package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// HTTP appends through a log server's POST /append.
type HTTP struct {
	Base string // the log's base URL (…/t/<tenant> for a tenant)
	// Tokens are the bearer tokens, taken in turn, one per append (a log limits each
	// token's rate: SPEC's 50 appends/s, burst 100); none: no Authorization header.
	Tokens []string
	Client *http.Client
	next   atomic.Uint64
}

// NewHTTP makes an HTTP appender with a client sized for clients connections; empty
// tokens are dropped.
func NewHTTP(base string, tokens []string, clients int) *HTTP {
	tr := &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, IdleConnTimeout: time.Minute}
	h := &HTTP{Base: strings.TrimRight(base, "/"), Client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	for _, t := range tokens {
		if t != "" {
			h.Tokens = append(h.Tokens, t)
		}
	}
	return h
}

// RateLimited is a 429 answer: the log refused the append for its rate limit and
// asked the client to wait RetryAfter.
type RateLimited struct {
	RetryAfter time.Duration // the answer's Retry-After; 1 s when it had none
	Message    string
}

func (e *RateLimited) Error() string {
	return fmt.Sprintf("429 Too Many Requests (retry after %s): %s", e.RetryAfter, e.Message)
}

// Name is "http".
func (h *HTTP) Name() string { return "http" }

// Append posts one leaf.
func (h *HTTP) Append(ctx context.Context, leaf []byte, hashOnly bool) (*receipt.Proof, error) {
	var body []byte
	if hashOnly {
		body = []byte(`{"leafHash":"` + merkle.LeafHash(leaf).String() + `"}`)
	} else {
		quoted, err := json.Marshal(string(leaf))
		if err != nil {
			return nil, err
		}
		body = append(append([]byte(`{"leaf":`), quoted...), '}')
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.Base+"/append", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if n := uint64(len(h.Tokens)); n > 0 {
		req.Header.Set("Authorization", "Bearer "+h.Tokens[(h.next.Add(1)-1)%n])
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || ra < 1 {
			ra = 1
		}
		return nil, &RateLimited{RetryAfter: time.Duration(min(ra, 60)) * time.Second, Message: strings.TrimSpace(string(data))}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	var p receipt.Proof
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	if p.TreeHead == nil {
		return nil, fmt.Errorf("answer without treeHead")
	}
	return &p, nil
}

// Consistency asks /consistency.
func (h *HTTP) Consistency(_ context.Context, oldSize, newSize uint64) ([]merkle.Hash, error) {
	s := &client.LogServer{Base: h.Base, Client: h.Client}
	return s.Consistency(oldSize, newSize)
}

// NATS appends over the pipeline's request/reply.
type NATS struct {
	Client *pipeline.Client
	Tenant string
	// Prove answers consistency proofs (the tenant's tree in-process, or a log server).
	Prove func(oldSize, newSize uint64) ([]merkle.Hash, error)
}

// Name is "nats".
func (n *NATS) Name() string { return "nats" }

// Append sends one request and waits for the answer (retrying as producers do).
func (n *NATS) Append(ctx context.Context, leaf []byte, hashOnly bool) (*receipt.Proof, error) {
	l := pipeline.NewLeaf(leaf)
	if hashOnly {
		l.Data = nil
	}
	return n.Client.Append(ctx, n.Tenant, l)
}

// Consistency uses Prove.
func (n *NATS) Consistency(_ context.Context, oldSize, newSize uint64) ([]merkle.Hash, error) {
	return n.Prove(oldSize, newSize)
}
