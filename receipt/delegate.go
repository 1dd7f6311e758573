package receipt

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"svc.dev/svc/signer"
)

// Why Delegate refuses. Each refusal is a *DelegationRefusal naming one of these, so a
// caller can add what its user should do (the command line names its flags).
var (
	ErrNotAGrant       = errors.New("not a delegation grant")
	ErrChainTooDeep    = errors.New("the chain is at its maximum depth")
	ErrParentChain     = errors.New("the parent's own chain does not verify")
	ErrNoAgentKey      = errors.New("the parent grant names no agentKey")
	ErrWrongAgentKey   = errors.New("the signing key is not the parent's agentKey")
	ErrScopeNotHeld    = errors.New("a scope is not held by the parent grant")
	ErrParentNotYet    = errors.New("the parent grant is not valid yet")
	ErrParentExpired   = errors.New("the parent grant expired")
	ErrOutlastsParent  = errors.New("the window ends after the parent grant")
	ErrSignedUnchecked = errors.New("the signed grant does not verify")
)

// DelegationRefusal is a delegation Delegate refused before signing (or, for
// ErrSignedUnchecked, after signing, without handing the grant out).
type DelegationRefusal struct {
	Reason  error         // one of the Err* above
	Message string        // what is wrong, in full
	Missing []string      // ErrScopeNotHeld: the scopes the parent lacks
	MaxTTL  time.Duration // ErrOutlastsParent: the longest ttl that fits now
}

func (r *DelegationRefusal) Error() string { return r.Message }
func (r *DelegationRefusal) Unwrap() error { return r.Reason }

func refuse(reason error, format string, args ...any) *DelegationRefusal {
	return &DelegationRefusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// DelegationRequest asks for a narrower grant below a parent grant.
type DelegationRequest struct {
	Agent    string            // the sub-agent; required
	Scopes   []string          // each held by the parent; required
	TTL      time.Duration     // from Now; must end no later than the parent
	AgentKey *signer.PublicKey // the sub-agent's key, so it can delegate further; optional
	Now      time.Time         // the new grant's issuedAt
}

// Delegate signs, with key, a grant for d.Agent chained to parentEnv: the parent's
// principal, d.Scopes, valid from d.Now for d.TTL, the parent embedded as "parent".
// It refuses, signing nothing, when the parent is not a grant, its chain does not
// verify or is already MaxChainDepth deep, it names no agentKey or another key than
// key, a scope is not the parent's, or the window does not lie inside the parent's;
// and it checks the new chain as a verifier will (all but the root signature) before
// returning it. Refusals are *DelegationRefusal.
func Delegate(parentEnv *Envelope, key *signer.Key, d DelegationRequest) (*Envelope, *Chain, error) {
	parent, err := delegationParent(parentEnv, key)
	if err != nil {
		return nil, nil, err
	}
	if err := delegationFits(parent, d); err != nil {
		return nil, nil, err
	}
	g := NewGrant(parent.Principal, d.Agent, d.Scopes, d.Now, d.TTL, d.AgentKey, parentEnv)
	env, err := SignJSON(PayloadDelegation, g, key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign grant: %w", err)
	}
	newChain, err := UnwrapChain(env)
	if err == nil {
		err = newChain.VerifyLinks()
	}
	if err == nil {
		err = newChain.Leaf().ValidAt(d.Now)
	}
	if err != nil {
		return nil, nil, refuse(ErrSignedUnchecked, "the signed grant does not verify (not written): %v", err)
	}
	return env, newChain, nil
}

// delegationParent checks the parent grant's chain and that key is its agentKey.
func delegationParent(parentEnv *Envelope, key *signer.Key) (*Grant, error) {
	if parentEnv.PayloadType != PayloadDelegation {
		return nil, refuse(ErrNotAGrant, "a %q envelope, not a delegation grant (%s)", parentEnv.PayloadType, PayloadDelegation)
	}
	chain, err := UnwrapChain(parentEnv)
	if err != nil {
		return nil, err
	}
	parent := chain.Leaf()
	if chain.Depth() >= MaxChainDepth {
		return nil, refuse(ErrChainTooDeep, "refusing to delegate: the parent grant is already %d grants deep and a chain holds at most %d (the principal's grant and %d delegations), so %q cannot delegate further",
			chain.Depth(), MaxChainDepth, MaxChainDepth-1, parent.Agent)
	}
	if err := chain.VerifyLinks(); err != nil {
		return nil, refuse(ErrParentChain, "refusing to delegate: the parent's own chain does not verify, so a grant delegated from it would not either: %v", err)
	}
	if parent.AgentKey == "" {
		return nil, refuse(ErrNoAgentKey, "refusing to delegate: the parent grant names no agentKey, so %q cannot delegate (nothing would let a verifier check the new link)", parent.Agent)
	}
	pk, err := signer.ParsePublicKeyPEM([]byte(parent.AgentKey))
	if err != nil {
		return nil, refuse(ErrNoAgentKey, "refusing to delegate: the parent grant's agentKey does not parse: %v", err)
	}
	if key.KeyID() != pk.KeyID {
		return nil, refuse(ErrWrongAgentKey, "refusing to delegate: the signing key (keyid %s) is not the key the parent grant names as %q's agentKey (keyid %s), so the chain would not verify",
			key.KeyID(), parent.Agent, pk.KeyID)
	}
	return parent, nil
}

// delegationFits checks d's scopes and window against the parent.
func delegationFits(parent *Grant, d DelegationRequest) error {
	var missing []string
	for _, s := range d.Scopes {
		if !parent.HasScope(s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		q := make([]string, len(missing))
		for i, s := range missing {
			q[i] = strconv.Quote(s)
		}
		r := refuse(ErrScopeNotHeld, "refusing to delegate: the parent grant does not hold %s (it holds: %s)", strings.Join(q, ", "), strings.Join(parent.Scopes, ", "))
		r.Missing = missing
		return r
	}
	pf, pt, err := parent.Window()
	if err != nil {
		return err
	}
	if d.Now.Before(pf) {
		return refuse(ErrParentNotYet, "refusing to delegate: the parent grant is not valid until %s (now is %s)", parent.IssuedAt, FormatTime(d.Now))
	}
	if !d.Now.Before(pt) {
		return refuse(ErrParentExpired, "refusing to delegate: the parent grant expired at %s (now is %s)", parent.ExpiresAt, FormatTime(d.Now))
	}
	if to := d.Now.Add(d.TTL); to.After(pt) {
		r := refuse(ErrOutlastsParent, "refusing to delegate: a ttl of %s would end at %s, after the parent grant expires at %s", d.TTL, FormatTime(to), parent.ExpiresAt)
		r.MaxTTL = pt.Sub(d.Now)
		return r
	}
	if err := CheckDelegation(parent, d.Scopes, d.Now, d.Now.Add(d.TTL)); err != nil {
		return fmt.Errorf("refusing to delegate: %w", err)
	}
	return nil
}
