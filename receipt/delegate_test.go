package receipt_test

import (
	"errors"
	"testing"
	"time"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func TestDelegateRefusesWithSentinels(t *testing.T) {
	principal, _ := signer.GenerateKey()
	agent, _ := signer.GenerateKey()
	other, _ := signer.GenerateKey()
	now := time.Now().UTC()
	agentPub := agent.Public()
	root := receipt.NewGrant("alice", "A", []string{"a", "b"}, now.Add(-time.Minute), 2*time.Hour, &agentPub, nil)
	rootEnv, err := receipt.SignJSON(receipt.PayloadDelegation, root, principal)
	if err != nil {
		t.Fatal(err)
	}
	req := receipt.DelegationRequest{Agent: "B", Scopes: []string{"a"}, TTL: time.Hour, Now: now}
	env, chain, err := receipt.Delegate(rootEnv, agent, req)
	if err != nil || chain.Depth() != 2 || chain.Leaf().Agent != "B" || env.PayloadType != receipt.PayloadDelegation {
		t.Fatalf("delegate: %v", err)
	}
	if _, err := chain.VerifyRoot([]signer.PublicKey{principal.Public()}); err != nil {
		t.Fatalf("the new chain's root: %v", err)
	}
	for _, c := range []struct {
		name string
		key  *signer.Key
		mod  func(*receipt.DelegationRequest)
		want error
	}{
		{"scope", agent, func(r *receipt.DelegationRequest) { r.Scopes = []string{"a", "z"} }, receipt.ErrScopeNotHeld},
		{"ttl", agent, func(r *receipt.DelegationRequest) { r.TTL = 3 * time.Hour }, receipt.ErrOutlastsParent},
		{"key", other, func(*receipt.DelegationRequest) {}, receipt.ErrWrongAgentKey},
		{"expired", agent, func(r *receipt.DelegationRequest) { r.Now = now.Add(3 * time.Hour) }, receipt.ErrParentExpired},
		{"early", agent, func(r *receipt.DelegationRequest) { r.Now = now.Add(-time.Hour) }, receipt.ErrParentNotYet},
	} {
		r := req
		c.mod(&r)
		_, _, err := receipt.Delegate(rootEnv, c.key, r)
		var ref *receipt.DelegationRefusal
		if !errors.Is(err, c.want) || !errors.As(err, &ref) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if c.want == receipt.ErrOutlastsParent && (ref == nil || ref.MaxTTL <= 0 || ref.MaxTTL > 2*time.Hour) {
			t.Errorf("ttl: MaxTTL %v", ref)
		}
	}
}
