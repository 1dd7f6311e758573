package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func init() {
	register("grant", "principal signs a delegation grant for an agent", runGrant)
}

const grantDescription = `The principal signs a delegation grant (a DSSE envelope of type
application/vnd.svc.delegation+json) naming the agent, the tools it may call and a
validity window that starts now and lasts --ttl-hours. The envelope is written to
--out (atomically, mode 0600: in HTTP mode a grant is the agent's credential).
Gateways accept it when it verifies against one of their trusted principal keys.

With --agent-key the grant names the agent's public key, which lets that agent sign
narrower grants for sub-agents with 'svc delegate'.

Example:
  svc keygen --dir keys --name principal
  svc grant --key keys/principal.key --principal alice@example.com --agent billing-bot \
    --scopes get_invoice,refund --ttl-hours 8 --out grants/billing-bot.json`

func runGrant(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("grant", "--key <principal .key> --principal <id> --agent <id> --scopes <a,b> --ttl-hours <n> --out <file> [--agent-key <agent .pub>]", grantDescription, stderr)
	var f grantFlags
	f.define(fs, grantFlagHelp{
		key:      "the principal's private key file (.key) that signs the grant (required)",
		agent:    "id of the agent the grant is for (required)",
		scopes:   "comma-separated tool names the agent may call (required)",
		ttl:      "validity in hours from now; fractions allowed, e.g. 0.5 (required, > 0)",
		agentKey: "the agent's public key file (.pub); lets the agent delegate further",
	})
	principal := fs.String("principal", "", "id of the principal on whose authority the agent acts (required)")
	if err := f.parse(fs, args, "the principal's .key file"); err != nil {
		return err
	}
	p := strings.TrimSpace(*principal)
	if p == "" {
		return usagef("--principal is required: the principal's id")
	}
	a, sc, ttl, err := grantCheckFlags(f.agent, "the agent's id", f.scopes, f.ttlHours, f.out)
	if err != nil {
		return err
	}
	key, agentKey, err := grantLoadKeys(f.key, f.agentKey)
	if err != nil {
		return err
	}

	now := grantNow()
	g := receipt.NewGrant(p, a, sc, now, ttl, agentKey, nil)
	env, err := receipt.SignJSON(receipt.PayloadDelegation, g, key)
	if err != nil {
		return fmt.Errorf("sign grant: %w", err)
	}
	// Check what was signed the way a gateway will before handing it out.
	if _, _, err := receipt.VerifyGrant(env, []signer.PublicKey{key.Public()}, now); err != nil {
		return fmt.Errorf("the signed grant does not verify (not written): %w", err)
	}
	if err := grantWriteFile(f.out, env); err != nil {
		return err
	}
	grantPrintSummary(stdout, "signed grant", f.out, g, key.KeyID(), 1)
	return nil
}

// grantCheckFlags checks the flags grant and delegate share: the agent's id (what
// names it in the usage error), the scopes, the ttl and the output file.
func grantCheckFlags(agent, agentWhat, scopes string, ttlHours float64, out string) (string, []string, time.Duration, error) {
	a := strings.TrimSpace(agent)
	if a == "" {
		return "", nil, 0, usagef("--agent is required: %s", agentWhat)
	}
	sc, err := grantParseScopes(scopes)
	if err != nil {
		return "", nil, 0, err
	}
	ttl, err := grantParseTTL(ttlHours)
	if err != nil {
		return "", nil, 0, err
	}
	if out == "" {
		return "", nil, 0, usagef("--out is required: the file to write the grant to")
	}
	return a, sc, ttl, nil
}

// grantLoadKeys loads the signing key and, when named, the agent's public key.
func grantLoadKeys(keyPath, agentKeyPath string) (*signer.Key, *signer.PublicKey, error) {
	key, err := signer.LoadPrivateKey(keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("--key: %w", err)
	}
	if agentKeyPath == "" {
		return key, nil, nil
	}
	k, err := signer.LoadPublicKey(agentKeyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("--agent-key: %w", err)
	}
	return key, &k, nil
}

// grantNow is the signing time: the clock truncated to the milliseconds grants are
// written with, so the window checked before signing is exactly the one written.
func grantNow() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// grantParseScopes reads a comma list of tool names: trimmed, empties dropped,
// duplicates removed, order kept. An empty list is a usage error.
func grantParseScopes(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" || seen[part] {
			continue
		}
		seen[part] = true
		out = append(out, part)
	}
	if len(out) == 0 {
		return nil, usagef("--scopes is required: a comma-separated list of tool names, e.g. --scopes get_invoice,refund")
	}
	return out, nil
}

// grantMaxTTLHours keeps now+ttl inside time.Duration and a four-digit year.
const grantMaxTTLHours = 100 * 366 * 24

// grantParseTTL turns --ttl-hours into a duration of whole milliseconds.
func grantParseTTL(hours float64) (time.Duration, error) {
	if math.IsNaN(hours) || hours <= 0 {
		return 0, usagef("--ttl-hours must be greater than 0 (got %v); fractions are allowed, e.g. 0.5", hours)
	}
	if hours > grantMaxTTLHours {
		return 0, usagef("--ttl-hours %v is too long; the limit is %d hours (100 years)", hours, grantMaxTTLHours)
	}
	ttl := time.Duration(hours * float64(time.Hour)).Truncate(time.Millisecond)
	if ttl <= 0 {
		return 0, usagef("--ttl-hours %v is shorter than a millisecond", hours)
	}
	return ttl, nil
}

// grantWriteFile writes a grant envelope as indented JSON, atomically, mode 0600.
func grantWriteFile(path string, env *receipt.Envelope) error {
	data, err := json.MarshalIndent(env, "", "  ")
	if err != nil {
		return err
	}
	if err := receipt.WriteFileAtomic(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write --out %s: %w", path, err)
	}
	return nil
}

// grantPrintSummary reports a grant that was written.
func grantPrintSummary(w io.Writer, what, path string, g *receipt.Grant, signerKeyID string, depth int) {
	fmt.Fprintf(w, "%s written to %s\n", what, path)
	fmt.Fprintf(w, "  principal   %s\n", g.Principal)
	fmt.Fprintf(w, "  agent       %s\n", g.Agent)
	fmt.Fprintf(w, "  scopes      %s\n", strings.Join(g.Scopes, ", "))
	if from, to, err := g.Window(); err == nil {
		fmt.Fprintf(w, "  valid       %s .. %s (%s)\n", g.IssuedAt, g.ExpiresAt, to.Sub(from))
	}
	fmt.Fprintf(w, "  signed by   keyid %s\n", signerKeyID)
	if depth > 1 {
		fmt.Fprintf(w, "  chain       %d grants deep (at most %d)\n", depth, receipt.MaxChainDepth)
	}
	if g.AgentKey != "" {
		if k, err := signer.ParsePublicKeyPEM([]byte(g.AgentKey)); err == nil {
			if depth >= receipt.MaxChainDepth {
				fmt.Fprintf(w, "  agentKey    keyid %s (the chain is at its maximum depth, so %s cannot delegate further)\n", k.KeyID, g.Agent)
			} else {
				fmt.Fprintf(w, "  agentKey    keyid %s (%s may delegate with 'svc delegate')\n", k.KeyID, g.Agent)
			}
		}
	} else {
		fmt.Fprintf(w, "  agentKey    none (%s cannot delegate further)\n", g.Agent)
	}
}

// grantFlags are the flags svc grant and svc delegate share.
type grantFlags struct {
	key, agent, scopes, out, agentKey string
	ttlHours                          float64
}

// grantFlagHelp words the shared flags for the command's signer.
type grantFlagHelp struct{ key, agent, scopes, ttl, agentKey string }

func (f *grantFlags) define(fs *flag.FlagSet, h grantFlagHelp) {
	fs.StringVar(&f.key, "key", "", h.key)
	fs.StringVar(&f.agent, "agent", "", h.agent)
	fs.StringVar(&f.scopes, "scopes", "", h.scopes)
	fs.Float64Var(&f.ttlHours, "ttl-hours", 0, h.ttl)
	fs.StringVar(&f.out, "out", "", "file to write the signed grant envelope to (required)")
	fs.StringVar(&f.agentKey, "agent-key", "", h.agentKey)
}

// parse parses args, which take no positional argument, and requires --key (keyWhat
// says what it is).
func (f *grantFlags) parse(fs *flag.FlagSet, args []string, keyWhat string) error {
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q", rest[0])
	}
	if f.key == "" {
		return usagef("--key is required: %s", keyWhat)
	}
	return nil
}
