package logserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"

	"svc.dev/svc/client"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Tenant is one log the server fronts.
type Tenant struct {
	ID    string // a valid pipeline tenant id; "default" is served at the root
	LogID string // named in heads and the key document when set
	// TokenHashes are SHA-256 hashes of the tenant's bearer tokens. Empty: appends
	// need no token, and the tenant routes (leaves, usage, audit) cannot be used.
	TokenHashes [][32]byte
	// Authorize, when set, decides instead of TokenHashes whether a bearer token is
	// one of the tenant's (the database-backed server asks its folded view, so a
	// revocation anywhere takes effect here); appends then always need a token. A
	// token it does not know may be checked further (with the broker) only when
	// mayAsk, the request's address's budget, says so.
	Authorize func(token string, mayAsk func() bool) bool
	Tree      *merkle.Tree           // read path; owned by the tenant's sequencer
	Signer    receipt.EnvelopeSigner // signs heads on request
	// Keys returns the key document (file mode: the in-process key; database mode: the
	// signer's /keys). Errors answer 503.
	Keys func(ctx context.Context) (*signer.KeyDocument, error)
	// Checkpoints lists the tenant's published checkpoints with treeSize > since;
	// nil when checkpoints are off.
	Checkpoints func(since uint64) ([]Checkpoint, error)
	// Usage returns the metering of a month (YYYY-MM); nil: 404.
	Usage func(month string) (*Usage, error)
	// CheckpointNote returns the latest C2SP signed-note checkpoint; an error wrapping
	// fs.ErrNotExist when none is published yet (404), any other a store that does
	// not answer (503); nil: the log publishes none.
	CheckpointNote func() ([]byte, error)
	// Audit returns the newest entries first; nil: empty.
	Audit func(limit int) ([]client.AuditEntry, error)
	// Entries serves the C2SP entry bundles (/tile/entries/...); nil: 404.
	Entries EntryBundles
	// Public, when set and true, serves the entry bundles without a token (the
	// tenant opted its log public); nil or false: bundles need the tenant's token.
	// Checkpoints and hash tiles never need one (tiles.go).
	Public func() bool
}

// Checkpoint is the API form of a published checkpoint.
type Checkpoint struct {
	TreeSize uint64            `json:"treeSize"`
	RootHash string            `json:"rootHash"`
	SignedAt string            `json:"signedAt"`
	TreeHead *receipt.Envelope `json:"treeHead"`
}

// Usage is a tenant's metering for a month. Quota is null when the plan has no
// allowance.
type Usage struct {
	Month       string  `json:"month"`
	Appends     uint64  `json:"appends"`
	TotalLeaves uint64  `json:"totalLeaves"`
	LiveTokens  int     `json:"liveTokens"`
	Plan        string  `json:"plan"`
	Quota       *uint64 `json:"quota"`
}

// HashToken is how tokens are stored: SHA-256 of the token text.
func HashToken(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// authorized reports whether token is one of t's, in time independent of which one
// or of how much of it matched.
func (t *Tenant) authorized(token string, mayAsk func() bool) bool {
	if token == "" {
		return false
	}
	if t.Authorize != nil {
		return t.Authorize(token, mayAsk)
	}
	h := HashToken(token)
	ok := 0
	for _, th := range t.TokenHashes {
		ok |= subtle.ConstantTimeCompare(h[:], th[:])
	}
	return ok == 1
}

// tokenRequired reports whether the tenant's appends and private reads need a token:
// it has tokens configured, or its tokens are decided by Authorize (database mode).
func (t *Tenant) tokenRequired() bool { return len(t.TokenHashes) > 0 || t.Authorize != nil }

func (t *Tenant) check() error {
	switch {
	case !client.ValidTenant(t.ID):
		return fmt.Errorf("tenant id %q is not valid: use 1 to 63 of a-z, 0-9, - and _", t.ID)
	case t.Tree == nil:
		return fmt.Errorf("tenant %s: no tree", t.ID)
	case t.Signer == nil:
		return fmt.Errorf("tenant %s: no signer", t.ID)
	case t.Keys == nil:
		return fmt.Errorf("tenant %s: no key document", t.ID)
	}
	return nil
}

var errNoTenant = errors.New("no such tenant")
