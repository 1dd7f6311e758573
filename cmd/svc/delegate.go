package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
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
	keyPath := fs.String("key", "", "the delegating agent's private key file (.key); its public key must be the parent grant's agentKey (required)")
	parentPath := fs.String("parent", "", "the grant file being delegated from (required)")
	agent := fs.String("agent", "", "id of the sub-agent the new grant is for (required)")
	scopes := fs.String("scopes", "", "comma-separated tool names, each held by the parent grant (required)")
	ttlHours := fs.Float64("ttl-hours", 0, "validity in hours from now; must end no later than the parent grant; fractions allowed (required, > 0)")
	out := fs.String("out", "", "file to write the signed grant envelope to (required)")
	agentKeyPath := fs.String("agent-key", "", "the sub-agent's public key file (.pub); lets the sub-agent delegate further")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	if *keyPath == "" {
		return usagef("--key is required: the delegating agent's .key file")
	}
	if *parentPath == "" {
		return usagef("--parent is required: the grant file to delegate from")
	}
	a := strings.TrimSpace(*agent)
	if a == "" {
		return usagef("--agent is required: the sub-agent's id")
	}
	sc, err := grantParseScopes(*scopes)
	if err != nil {
		return err
	}
	ttl, err := grantParseTTL(*ttlHours)
	if err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out is required: the file to write the grant to")
	}

	// The parent grant and its chain.
	data, err := receipt.ReadFileCapped(*parentPath, receipt.MaxEnvelopeSize)
	if err != nil {
		return fmt.Errorf("--parent: %w", err)
	}
	parentEnv, err := receipt.ParseEnvelope(data)
	if err != nil {
		return fmt.Errorf("--parent %s is not a grant envelope: %w", *parentPath, err)
	}
	if parentEnv.PayloadType != receipt.PayloadDelegation {
		return fmt.Errorf("--parent %s is a %q envelope, not a delegation grant (%s); pass the grant file 'svc grant' or 'svc delegate' wrote", *parentPath, parentEnv.PayloadType, receipt.PayloadDelegation)
	}
	chain, err := receipt.UnwrapChain(parentEnv)
	if err != nil {
		return fmt.Errorf("--parent %s: %w", *parentPath, err)
	}
	parent := chain.Leaf()
	if chain.Depth() >= receipt.MaxChainDepth {
		return fmt.Errorf("refusing to delegate: the parent grant is already %d grants deep and a chain holds at most %d (the principal's grant and %d delegations), so %q cannot delegate further; ask the principal, or an agent higher in the chain, to grant %q directly",
			chain.Depth(), receipt.MaxChainDepth, receipt.MaxChainDepth-1, parent.Agent, a)
	}
	if err := chain.VerifyLinks(); err != nil {
		return fmt.Errorf("refusing to delegate: the parent's own chain does not verify, so a grant delegated from it would not either: %w", err)
	}
	if parent.AgentKey == "" {
		return fmt.Errorf("refusing to delegate: the parent grant names no agentKey, so %q cannot delegate (nothing would let a verifier check the new link); ask whoever signed the parent to re-issue it with --agent-key <%s's .pub>", parent.Agent, parent.Agent)
	}
	parentAgentKey, err := signer.ParsePublicKeyPEM([]byte(parent.AgentKey))
	if err != nil {
		return fmt.Errorf("refusing to delegate: the parent grant's agentKey does not parse: %w", err)
	}

	key, err := signer.LoadPrivateKey(*keyPath)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	if key.KeyID() != parentAgentKey.KeyID {
		return fmt.Errorf("refusing to delegate: --key %s (keyid %s) is not the key the parent grant names as %q's agentKey (keyid %s), so the chain would not verify; sign with the private key whose .pub was passed as --agent-key when the parent was granted",
			*keyPath, key.KeyID(), parent.Agent, parentAgentKey.KeyID)
	}

	// Scopes and window, checked before anything is signed.
	var missing []string
	for _, s := range sc {
		if !parent.HasScope(s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("refusing to delegate: the parent grant does not hold %s (it holds: %s); pass a subset of the parent's scopes in --scopes",
			delegateQuoteList(missing), strings.Join(parent.Scopes, ", "))
	}
	pf, pt, err := parent.Window()
	if err != nil {
		return fmt.Errorf("--parent %s: %w", *parentPath, err)
	}
	now := grantNow()
	if now.Before(pf) {
		return fmt.Errorf("refusing to delegate: the parent grant is not valid until %s (now is %s); delegate once it is, or check this machine's clock", parent.IssuedAt, receipt.FormatTime(now))
	}
	if !now.Before(pt) {
		return fmt.Errorf("refusing to delegate: the parent grant expired at %s (now is %s); ask for a fresh grant to delegate from", parent.ExpiresAt, receipt.FormatTime(now))
	}
	to := now.Add(ttl)
	if to.After(pt) {
		return fmt.Errorf("refusing to delegate: --ttl-hours %v would end at %s, after the parent grant expires at %s; the longest --ttl-hours that fits now is %s",
			*ttlHours, receipt.FormatTime(to), parent.ExpiresAt, delegateMaxHours(pt.Sub(now).Hours()))
	}
	if err := receipt.CheckDelegation(parent, sc, now, to); err != nil {
		return fmt.Errorf("refusing to delegate: %w", err)
	}

	var agentKey *signer.PublicKey
	if *agentKeyPath != "" {
		k, err := signer.LoadPublicKey(*agentKeyPath)
		if err != nil {
			return fmt.Errorf("--agent-key: %w", err)
		}
		agentKey = &k
		if chain.Depth()+1 >= receipt.MaxChainDepth {
			fmt.Fprintf(stderr, "svc delegate: note: the new grant is at the maximum chain depth (%d), so %q will not be able to delegate even with --agent-key\n", receipt.MaxChainDepth, a)
		}
	}

	g := receipt.NewGrant(parent.Principal, a, sc, now, ttl, agentKey, parentEnv)
	env, err := receipt.SignJSON(receipt.PayloadDelegation, g, key)
	if err != nil {
		return fmt.Errorf("sign grant: %w", err)
	}
	// Check the new chain the way a verifier will (all but the root signature, whose
	// key this command does not have) before handing it out.
	newChain, err := receipt.UnwrapChain(env)
	if err == nil {
		err = newChain.VerifyLinks()
	}
	if err == nil {
		err = newChain.Leaf().ValidAt(now)
	}
	if err != nil {
		return fmt.Errorf("the signed grant does not verify (not written): %w", err)
	}
	if err := grantWriteFile(*out, env); err != nil {
		return err
	}
	grantPrintSummary(stdout, "delegated grant", *out, g, key.KeyID(), newChain.Depth())
	fmt.Fprintf(stdout, "  delegated   by %s, from the grant in %s\n", parent.Agent, *parentPath)
	return nil
}

// delegateMaxHours formats the longest ttl that fits, rounded down so it still fits.
func delegateMaxHours(h float64) string {
	h = math.Floor(h*1000) / 1000
	if h <= 0 {
		return "less than 0.001 (the parent grant is about to expire; ask for a fresh one)"
	}
	return strconv.FormatFloat(h, 'f', -1, 64)
}

func delegateQuoteList(ss []string) string {
	q := slices.Clone(ss)
	for i, s := range q {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
