package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"svc.dev/svc/receipt"
)

func init() {
	register("delegate", "sign a narrower grant for a sub-agent, chained to the parent grant", runDelegate)
}

var delegateDescription = fmt.Sprintf(`An agent whose grant names its public key (agentKey) signs a narrower grant
for a sub-agent. The new grant keeps the parent's principal, embeds the parent
grant (and so the whole chain) as "parent", and is valid from now for --ttl-hours.

Before signing, delegate refuses, and writes nothing, when:
  - a scope in --scopes is not held by the parent grant;
  - the window now .. now+ttl does not lie inside the parent's window (the
    message gives the longest --ttl-hours that fits);
  - the parent grant names no agentKey, or --key is not the key it names (the
    chain would not verify);
  - the chain would be more than %d grants deep (the principal's grant and at
    most %d delegations below it);
  - the parent's own chain does not verify.

Example:
  svc delegate --key keys/billing-bot.key --parent grants/billing-bot.json \
    --agent refund-helper --scopes refund --ttl-hours 1 \
    --out grants/refund-helper.json`, receipt.MaxChainDepth, receipt.MaxChainDepth-1)

func runDelegate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("delegate", "--key <agent .key> --parent <grant file> --agent <sub-agent id> --scopes <a,b> --ttl-hours <n> --out <file> [--agent-key <sub-agent .pub>]", delegateDescription, stderr)
	var f grantFlags
	f.define(fs, grantFlagHelp{
		key:      "the delegating agent's private key file (.key); its public key must be the parent grant's agentKey (required)",
		agent:    "id of the sub-agent the new grant is for (required)",
		scopes:   "comma-separated tool names, each held by the parent grant (required)",
		ttl:      "validity in hours from now; must end no later than the parent grant; fractions allowed (required, > 0)",
		agentKey: "the sub-agent's public key file (.pub); lets the sub-agent delegate further",
	})
	parentPath := fs.String("parent", "", "the grant file being delegated from (required)")
	if err := f.parse(fs, args, "the delegating agent's .key file"); err != nil {
		return err
	}
	if *parentPath == "" {
		return usagef("--parent is required: the grant file to delegate from")
	}
	a, sc, ttl, err := grantCheckFlags(f.agent, "the sub-agent's id", f.scopes, f.ttlHours, f.out)
	if err != nil {
		return err
	}

	data, err := receipt.ReadFileCapped(*parentPath, receipt.MaxEnvelopeSize)
	if err != nil {
		return fmt.Errorf("--parent: %w", err)
	}
	parentEnv, err := receipt.ParseEnvelope(data)
	if err != nil {
		return fmt.Errorf("--parent %s is not a grant envelope: %w", *parentPath, err)
	}
	key, agentKey, err := grantLoadKeys(f.key, f.agentKey)
	if err != nil {
		return err
	}
	env, chain, err := receipt.Delegate(parentEnv, key, receipt.DelegationRequest{Agent: a, Scopes: sc, TTL: ttl, AgentKey: agentKey, Now: grantNow()})
	if err != nil {
		return delegateHint(err, *parentPath, f.key, f.ttlHours, a)
	}
	g := chain.Leaf()
	if agentKey != nil && chain.Depth() >= receipt.MaxChainDepth {
		fmt.Fprintf(stderr, "svc delegate: note: the new grant is at the maximum chain depth (%d), so %q will not be able to delegate even with --agent-key\n", receipt.MaxChainDepth, a)
	}
	if err := grantWriteFile(f.out, env); err != nil {
		return err
	}
	grantPrintSummary(stdout, "delegated grant", f.out, g, key.KeyID(), chain.Depth())
	fmt.Fprintf(stdout, "  delegated   by %s, from the grant in %s\n", chain.Grants[chain.Depth()-2].Agent, *parentPath)
	return nil
}

// delegateHint adds to a refusal what to do about it on the command line.
func delegateHint(err error, parentPath, keyPath string, ttlHours float64, agent string) error {
	var r *receipt.DelegationRefusal
	if !errors.As(err, &r) {
		return fmt.Errorf("--parent %s: %w", parentPath, err)
	}
	switch r.Reason {
	case receipt.ErrNotAGrant:
		return fmt.Errorf("--parent %s is %s; pass the grant file 'svc grant' or 'svc delegate' wrote", parentPath, r.Message)
	case receipt.ErrChainTooDeep:
		return fmt.Errorf("%s; ask the principal, or an agent higher in the chain, to grant %q directly", r.Message, agent)
	case receipt.ErrNoAgentKey:
		return fmt.Errorf("%s; ask whoever signed the parent to re-issue it with --agent-key <the agent's .pub>", r.Message)
	case receipt.ErrWrongAgentKey:
		return fmt.Errorf("%s (--key %s); sign with the private key whose .pub was passed as --agent-key when the parent was granted", r.Message, keyPath)
	case receipt.ErrScopeNotHeld:
		return fmt.Errorf("%s; pass a subset of the parent's scopes in --scopes", r.Message)
	case receipt.ErrParentNotYet:
		return fmt.Errorf("%s; delegate once it is, or check this machine's clock", r.Message)
	case receipt.ErrParentExpired:
		return fmt.Errorf("%s; ask for a fresh grant to delegate from", r.Message)
	case receipt.ErrOutlastsParent:
		return fmt.Errorf("%s (--ttl-hours %v); the longest --ttl-hours that fits now is %s", r.Message, ttlHours, delegateMaxHours(r.MaxTTL.Hours()))
	}
	return r
}

// delegateMaxHours formats the longest ttl that fits, rounded down so it still fits.
func delegateMaxHours(h float64) string {
	h = math.Floor(h*1000) / 1000
	if h <= 0 {
		return "less than 0.001 (the parent grant is about to expire; ask for a fresh one)"
	}
	return strconv.FormatFloat(h, 'f', -1, 64)
}
