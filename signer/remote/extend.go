package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"svc.dev/svc/receipt"
)

// ErrConflict: the signer refused a head because it does not extend the last head it
// signed for the log (a smaller size, another root at the same size, or no valid
// consistency proof). It wraps ErrRefused.
var ErrConflict = fmt.Errorf("%w: the head does not extend the last one signed", ErrRefused)

// catchUpWait bounds how long SignHeadOf waits for a tree that is behind the head the
// signer last signed (a read-only replica of a log another process appends to).
const catchUpWait = 3 * time.Second

// heads is the client's memory of the last head signed per log (state key), so that a
// request carries the right consistency proof at once; a signer's 409 corrects it.
type heads struct {
	mu    sync.Mutex
	last  map[string]SignedHead
	locks map[string]*sync.Mutex
}

func (h *heads) lock(key string) (unlock func()) {
	h.mu.Lock()
	if h.locks == nil {
		h.locks, h.last = map[string]*sync.Mutex{}, map[string]SignedHead{}
	}
	l, ok := h.locks[key]
	if !ok {
		l = &sync.Mutex{}
		h.locks[key] = l
	}
	h.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (h *heads) get(key string) (SignedHead, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.last[key]
	return s, ok
}

func (h *heads) set(s SignedHead) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last[s.Log] = s
}

var _ receipt.HeadSigner = (*Client)(nil)

// LogIDOf is the log id the heads of tenant carry: logID when set, else the tenant's
// receipt.DefaultLogID.
func (c *Client) LogIDOf(tenant, logID string) string {
	if logID != "" || tenant == "" {
		return logID
	}
	return receipt.DefaultLogID(tenant)
}

// SignHeadOf signs the head of tree as it stands, with a consistency proof from the
// last head signed for the log, and returns the envelope and the head it carries. The
// heads of one log are signed one at a time, the tree read under that lock, so the
// heads this process asks for never go backwards. When the signer names another last
// head (another process signed, or the signer restarted after this one), it retries
// with a proof from that head; a tree behind that head (a read-only replica) is waited
// for up to a few seconds. A head the signer still refuses wraps ErrConflict.
//
// A head always names its log: logID, or when empty the tenant's default
// (receipt.DefaultLogID), which the signer requires.
func (c *Client) SignHeadOf(ctx context.Context, tree receipt.HeadTree, tenant, logID string, at time.Time) (*receipt.Envelope, *receipt.TreeHead, error) {
	logID = c.LogIDOf(tenant, logID)
	key := StateKey(logID, tenant)
	unlock := c.heads.lock(key)
	defer unlock()
	var lastErr error
	for range 4 {
		th, req, err := c.headRequest(tree, key, tenant, logID, at)
		if err != nil {
			return nil, nil, err
		}
		env, err := c.signRequest(ctx, req)
		if err == nil {
			c.heads.set(SignedHead{Log: key, TreeSize: th.TreeSize, RootHash: th.RootHash})
			return env, th, nil
		}
		var conflict *conflictError
		if !errors.As(err, &conflict) {
			return nil, nil, err
		}
		lastErr = err
		last := conflict.Last
		if last.Log != key || (last.TreeSize == th.TreeSize && last.RootHash != th.RootHash) {
			return nil, nil, err // a fork: never retried
		}
		c.heads.set(last)
		if last.TreeSize > th.TreeSize && !waitForSize(ctx, tree, last.TreeSize) {
			return nil, nil, err
		}
	}
	return nil, nil, lastErr
}

// headRequest reads the tree's head and builds its sign request, with a consistency
// proof from the last head known to be signed for the log.
func (c *Client) headRequest(tree receipt.HeadTree, key, tenant, logID string, at time.Time) (*receipt.TreeHead, *SignRequest, error) {
	size := tree.Size()
	root, err := tree.RootAt(size)
	if err != nil {
		return nil, nil, err
	}
	th := &receipt.TreeHead{TreeSize: size, RootHash: root.String(), Timestamp: receipt.FormatTime(at), Log: logID}
	payload, err := receipt.TreeHeadPayload(*th)
	if err != nil {
		return nil, nil, err
	}
	req := &SignRequest{PayloadType: receipt.PayloadTreeHead, Payload: payload, Tenant: tenant}
	if last, ok := c.heads.get(key); ok && last.TreeSize < size {
		proof, err := tree.ConsistencyProof(last.TreeSize, size)
		if err != nil {
			return nil, nil, fmt.Errorf("consistency proof from size %d to %d: %w", last.TreeSize, size, err)
		}
		req.Consistency = &Consistency{FromSize: last.TreeSize, Proof: make([]string, len(proof))}
		for i, h := range proof {
			req.Consistency.Proof[i] = h.String()
		}
	}
	return th, req, nil
}

// waitForSize waits until tree has at least size leaves, for at most catchUpWait.
func waitForSize(ctx context.Context, tree receipt.HeadTree, size uint64) bool {
	deadline := time.Now().Add(catchUpWait)
	for tree.Size() < size {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// conflictError is a 409 answer of POST /sign.
type conflictError struct {
	Conflict
	endpoint string
}

func (e *conflictError) Error() string {
	return fmt.Sprintf("%v: POST %s answered 409: %s", ErrConflict, e.endpoint, e.Conflict.Error)
}

func (e *conflictError) Unwrap() error { return ErrConflict }

// parseConflict reads a 409 body; nil if it is not a Conflict.
func parseConflict(endpoint string, code int, data []byte) error {
	if code != http.StatusConflict {
		return nil
	}
	var c Conflict
	if json.Unmarshal(data, &c) != nil || c.Error == "" {
		return nil
	}
	return &conflictError{Conflict: c, endpoint: endpoint}
}
