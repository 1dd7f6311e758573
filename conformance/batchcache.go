package conformance

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"sync/atomic"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// maxCacheEntries bounds each of a batch's caches; a full cache is emptied and
// refilled, so memory stays flat however many distinct heads a batch holds.
const maxCacheEntries = 1 << 16

// verifyCache remembers, for one batch with one fixed set of options (keys, log copy,
// checkpoint), the results of the checks that bundles share: a grant's chain with its
// root signature and links, a tree head's signature, the witness checkpoint's
// signature, the consistency of a head with that checkpoint, and the checks of each
// tool-definitions statement given. Entries are keyed by the SHA-256 of what was
// checked (the canonical envelope, or size and root; a statement, fixed for the batch,
// by its bundle), so a bundle that differs in a single byte misses the cache and is
// checked in full. The
// cached values are read-only once stored; it is safe for concurrent use.
type verifyCache struct {
	grants     lockedMap[[32]byte, *grantResult]
	heads      lockedMap[[32]byte, *headResult]
	consistent lockedMap[headPoint, error]
	// statements are the tool-definitions statements' checks, by bundle: they come
	// from Options.ToolDefinitions, one set for the batch, and every receipt citing a
	// definition checks one (conformance/tooldefs.go).
	statements lockedMap[*receipt.Bundle, *statementResult]

	witnessOnce sync.Once
	witness     *witnessResult

	hits, misses atomic.Int64
}

type grantResult struct {
	chain    *receipt.Chain
	chainErr error // UnwrapChain's error
	rootKey  signer.PublicKey
	rootErr  error // VerifyRoot's error
	linksErr error // VerifyLinks' error (depth > 1 only)
}

type headResult struct {
	th  *receipt.TreeHead
	who string
	err error
}

type witnessResult struct {
	key signer.PublicKey
	th  *receipt.TreeHead
	err error
}

// headPoint is a tree state: a size and its root.
type headPoint struct {
	size uint64
	root string
}

// envelopeKey identifies an envelope by what it holds: SHA-256 over its fields, each
// after its length, so that no two envelopes share a key. Unlike its canonical JSON
// it needs no base64.
func envelopeKey(env *receipt.Envelope) [32]byte {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte(env.PayloadType))
	field(env.Payload)
	for _, s := range env.Signatures {
		field([]byte(s.KeyID))
		field(s.Sig)
	}
	var key [32]byte
	h.Sum(key[:0])
	return key
}

// lockedMap is a size-bounded map behind a read-write lock.
type lockedMap[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

func (l *lockedMap[K, V]) get(k K) (V, bool) {
	l.mu.RLock()
	v, ok := l.m[k]
	l.mu.RUnlock()
	return v, ok
}

func (l *lockedMap[K, V]) put(k K, v V) {
	l.mu.Lock()
	if l.m == nil || len(l.m) >= maxCacheEntries {
		l.m = make(map[K]V)
	}
	l.m[k] = v
	l.mu.Unlock()
}

// grant returns the checked chain of a delegation envelope, from the cache when c is set.
func (c *verifyCache) grant(env *receipt.Envelope, principalKeys []signer.PublicKey) *grantResult {
	var key [32]byte
	if c != nil {
		key = envelopeKey(env)
		if g, ok := c.grants.get(key); ok {
			c.hits.Add(1)
			return g
		}
		c.misses.Add(1)
	}
	g := &grantResult{}
	g.chain, g.chainErr = receipt.UnwrapChain(env)
	if g.chainErr == nil {
		g.rootKey, g.rootErr = g.chain.VerifyRoot(principalKeys)
		if g.chain.Depth() > 1 {
			g.linksErr = g.chain.VerifyLinks()
		}
	}
	if c != nil {
		c.grants.put(key, g)
	}
	return g
}

// head returns a tree head's decoded form and signature check, from the cache when c is set.
func (c *verifyCache) head(env *receipt.Envelope, check func(*receipt.Envelope) (*receipt.TreeHead, string, error)) (*receipt.TreeHead, string, error) {
	if c == nil {
		return check(env)
	}
	key := envelopeKey(env)
	if h, ok := c.heads.get(key); ok {
		c.hits.Add(1)
		return h.th, h.who, h.err
	}
	c.misses.Add(1)
	th, who, err := check(env)
	c.heads.put(key, &headResult{th: th, who: who, err: err})
	return th, who, err
}

// statement returns a tool-definitions statement's checks, from the cache when c is set.
func (c *verifyCache) statement(b *receipt.Bundle, check func(*receipt.Bundle) *statementResult) *statementResult {
	if c == nil {
		return check(b)
	}
	if s, ok := c.statements.get(b); ok {
		c.hits.Add(1)
		return s
	}
	c.misses.Add(1)
	s := check(b)
	c.statements.put(b, s)
	return s
}

// witnessHead checks the witness checkpoint once per batch.
func (c *verifyCache) witnessHead(env *receipt.Envelope, keys []signer.PublicKey) (signer.PublicKey, *receipt.TreeHead, error) {
	check := func() *witnessResult {
		w := &witnessResult{}
		w.key, w.err = env.Verify(keys)
		if w.err == nil {
			w.th, w.err = receipt.DecodeTreeHead(env)
		}
		return w
	}
	if c == nil {
		w := check()
		return w.key, w.th, w.err
	}
	c.witnessOnce.Do(func() { c.witness = check() })
	return c.witness.key, c.witness.th, c.witness.err
}

// extends proves th consistent with w once per distinct (size, root) of th.
func (c *verifyCache) extends(th, w *receipt.TreeHead, src ConsistencySource) error {
	if c == nil {
		return extends(th, w, src)
	}
	k := headPoint{th.TreeSize, th.RootHash}
	if err, ok := c.consistent.get(k); ok {
		c.hits.Add(1)
		return err
	}
	c.misses.Add(1)
	err := extends(th, w, src)
	c.consistent.put(k, err)
	return err
}

// proofCache asks its source for each consistency proof once: the batch's heads share
// sizes, and each size is proved against the one checkpoint.
type proofCache struct {
	src    ConsistencySource
	proofs lockedMap[[2]uint64, proofResult]
}

type proofResult struct {
	proof []merkle.Hash
	err   error
}

func (p *proofCache) Consistency(oldSize, newSize uint64) ([]merkle.Hash, error) {
	k := [2]uint64{oldSize, newSize}
	if r, ok := p.proofs.get(k); ok {
		return r.proof, r.err
	}
	proof, err := p.src.Consistency(oldSize, newSize)
	p.proofs.put(k, proofResult{proof, err})
	return proof, err
}

func (p *proofCache) Describe() string { return p.src.Describe() }
