package receipt

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"svc.dev/svc/signer"
)

// GrantVersion is the delegation grant payload's version.
const GrantVersion = "0.1"

// MaxChainDepth is the most grants a chain may hold: a principal's grant (depth 1)
// and at most two further delegations below it.
const MaxChainDepth = 3

// Grant is a delegation grant payload (application/vnd.svc.delegation+json), signed by
// the principal or, in a chain, by the key its parent names in AgentKey.
type Grant struct {
	Version   string    `json:"version"` // GrantVersion
	Principal string    `json:"principal"`
	Agent     string    `json:"agent"`
	Scopes    []string  `json:"scopes"` // tool names
	IssuedAt  string    `json:"issuedAt"`
	ExpiresAt string    `json:"expiresAt"`
	AgentKey  string    `json:"agentKey,omitempty"` // SPKI PEM; lets the agent delegate further
	Parent    *Envelope `json:"parent,omitempty"`   // the grant this one was delegated from
}

// Errors of grant checking; test with errors.Is.
var (
	ErrGrantMalformed = errors.New("grant malformed")
	ErrGrantUntrusted = errors.New("grant not signed by a trusted principal key")
	ErrGrantChain     = errors.New("delegation chain broken")
	ErrGrantWindow    = errors.New("grant not valid at this time")
)

// Window returns the grant's validity window.
func (g *Grant) Window() (from, to time.Time, err error) {
	from, err = ParseTime(g.IssuedAt)
	if err != nil {
		return from, to, fmt.Errorf("%w: issuedAt: %w", ErrGrantMalformed, err)
	}
	to, err = ParseTime(g.ExpiresAt)
	if err != nil {
		return from, to, fmt.Errorf("%w: expiresAt: %w", ErrGrantMalformed, err)
	}
	if !to.After(from) {
		return from, to, fmt.Errorf("%w: expiresAt %s is not after issuedAt %s", ErrGrantMalformed, g.ExpiresAt, g.IssuedAt)
	}
	return from, to, nil
}

// ValidAt reports nil when t lies inside the grant's window.
func (g *Grant) ValidAt(t time.Time) error {
	from, to, err := g.Window()
	if err != nil {
		return err
	}
	if t.Before(from) {
		return fmt.Errorf("%w: %s is before issuedAt %s", ErrGrantWindow, FormatTime(t), g.IssuedAt)
	}
	if t.After(to) {
		return fmt.Errorf("%w: %s is after expiresAt %s (expired)", ErrGrantWindow, FormatTime(t), g.ExpiresAt)
	}
	return nil
}

// HasScope reports whether the grant names tool.
func (g *Grant) HasScope(tool string) bool { return slices.Contains(g.Scopes, tool) }

// DecodeGrant reads the grant payload of env.
func DecodeGrant(env *Envelope) (*Grant, error) {
	var g Grant
	if err := env.DecodePayload(PayloadDelegation, &g); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGrantMalformed, err)
	}
	if g.Version != GrantVersion {
		return nil, fmt.Errorf("%w: version %q, want %q", ErrGrantMalformed, g.Version, GrantVersion)
	}
	if g.Principal == "" || g.Agent == "" {
		return nil, fmt.Errorf("%w: principal and agent must be set", ErrGrantMalformed)
	}
	if g.Scopes == nil {
		return nil, fmt.Errorf("%w: scopes is missing", ErrGrantMalformed)
	}
	if _, _, err := g.Window(); err != nil {
		return nil, err
	}
	return &g, nil
}

// Chain is a decoded delegation chain, root (the principal's grant) first.
type Chain struct {
	Envelopes []*Envelope
	Grants    []*Grant
}

// Root is the principal's grant.
func (c *Chain) Root() *Grant { return c.Grants[0] }

// Leaf is the grant that was presented: the one naming the acting agent.
func (c *Chain) Leaf() *Grant { return c.Grants[len(c.Grants)-1] }

// Depth is the number of grants in the chain (1 for an unchained grant).
func (c *Chain) Depth() int { return len(c.Grants) }

// maxUnwrapDepth bounds how far UnwrapChain follows parents, so a hostile grant cannot
// make a reader recurse without end; chains deeper than MaxChainDepth are read and then
// refused by VerifyLinks, so the report names the chain as the problem.
const maxUnwrapDepth = 16

// UnwrapChain decodes env and every parent it embeds. It checks the form of each grant,
// not signatures or depth (VerifyLinks does).
func UnwrapChain(env *Envelope) (*Chain, error) {
	var envs []*Envelope
	var grants []*Grant
	for e := env; e != nil; {
		if len(envs) == maxUnwrapDepth {
			return nil, fmt.Errorf("%w: more than %d grants deep", ErrGrantMalformed, maxUnwrapDepth)
		}
		g, err := DecodeGrant(e)
		if err != nil {
			return nil, err
		}
		envs = append(envs, e)
		grants = append(grants, g)
		e = g.Parent
	}
	slices.Reverse(envs)
	slices.Reverse(grants)
	return &Chain{Envelopes: envs, Grants: grants}, nil
}

// VerifyRoot checks that the root grant is signed by one of the trusted principal keys
// and returns that key.
func (c *Chain) VerifyRoot(principalKeys []signer.PublicKey) (signer.PublicKey, error) {
	k, err := c.Envelopes[0].Verify(principalKeys)
	if err != nil {
		return k, fmt.Errorf("%w: %w", ErrGrantUntrusted, err)
	}
	return k, nil
}

// VerifyLinks checks the depth and every link below the root: signed by the key its parent names in
// agentKey, scopes held by the parent, window inside the parent's, same principal.
func (c *Chain) VerifyLinks() error {
	if c.Depth() > MaxChainDepth {
		return fmt.Errorf("%w: %d grants deep; at most %d are allowed", ErrGrantChain, c.Depth(), MaxChainDepth)
	}
	for i := 1; i < len(c.Grants); i++ {
		if err := checkLink(c.Grants[i-1], c.Envelopes[i], c.Grants[i]); err != nil {
			return fmt.Errorf("%w: link %d (agent %q): %w", ErrGrantChain, i+1, c.Grants[i].Agent, err)
		}
	}
	return nil
}

// CheckDelegation is what `svc delegate` runs before signing: may a grant with these
// scopes and window be delegated from parent? Times are compared at the millisecond
// precision grants are written with.
func CheckDelegation(parent *Grant, scopes []string, from, to time.Time) error {
	from, to = from.Truncate(time.Millisecond), to.Truncate(time.Millisecond)
	for _, s := range scopes {
		if !parent.HasScope(s) {
			return fmt.Errorf("scope %q is not held by the parent grant (parent scopes: %v)", s, parent.Scopes)
		}
	}
	pf, pt, err := parent.Window()
	if err != nil {
		return err
	}
	if from.Before(pf) || to.After(pt) {
		return fmt.Errorf("window %s..%s lies outside the parent's %s..%s", FormatTime(from), FormatTime(to), parent.IssuedAt, parent.ExpiresAt)
	}
	return nil
}

func checkLink(parent *Grant, childEnv *Envelope, child *Grant) error {
	if parent.AgentKey == "" {
		return errors.New("parent grant names no agentKey, so it cannot delegate")
	}
	pk, err := signer.ParsePublicKeyPEM([]byte(parent.AgentKey))
	if err != nil {
		return fmt.Errorf("parent agentKey: %w", err)
	}
	if _, err := childEnv.Verify([]signer.PublicKey{pk}); err != nil {
		return fmt.Errorf("not signed by the parent's agentKey %s", pk.KeyID)
	}
	if child.Principal != parent.Principal {
		return fmt.Errorf("principal changed from %q to %q", parent.Principal, child.Principal)
	}
	from, to, err := child.Window()
	if err != nil {
		return err
	}
	return CheckDelegation(parent, child.Scopes, from, to)
}

// VerifyGrant runs every grant check a gateway needs at time now: form, depth, root
// signed by a trusted principal key, every link, and the leaf inside its window. It
// returns the chain and the principal key that signed the root.
func VerifyGrant(env *Envelope, principalKeys []signer.PublicKey, now time.Time) (*Chain, signer.PublicKey, error) {
	c, err := UnwrapChain(env)
	if err != nil {
		return nil, signer.PublicKey{}, err
	}
	k, err := c.VerifyRoot(principalKeys)
	if err != nil {
		return nil, k, err
	}
	if err := c.VerifyLinks(); err != nil {
		return nil, k, err
	}
	for _, g := range c.Grants {
		if err := g.ValidAt(now); err != nil {
			return nil, k, err
		}
	}
	return c, k, nil
}

// NewGrant builds a grant payload valid from issuedAt for ttl.
func NewGrant(principal, agent string, scopes []string, issuedAt time.Time, ttl time.Duration, agentKey *signer.PublicKey, parent *Envelope) *Grant {
	g := &Grant{
		Version:   GrantVersion,
		Principal: principal,
		Agent:     agent,
		Scopes:    scopes,
		IssuedAt:  FormatTime(issuedAt),
		ExpiresAt: FormatTime(issuedAt.Add(ttl)),
		Parent:    parent,
	}
	if agentKey != nil {
		g.AgentKey = agentKey.PEM()
	}
	return g
}

// FormatTime writes t as RFC 3339 UTC with milliseconds.
func FormatTime(t time.Time) string { return signer.FormatTime(t) }

// ParseTime accepts any RFC 3339 time.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return t, fmt.Errorf("not an RFC 3339 time: %q", s)
	}
	return t, nil
}
