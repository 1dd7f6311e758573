package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Meta keys the gateway sets and the agent cannot.
const (
	MetaReceipt           = "svc/receipt"
	MetaAgent             = "svc/agent"
	MetaPrincipal         = "svc/principal"
	MetaObserved          = "svc/observed"
	MetaFacts             = "svc/facts"
	MetaModel             = "svc/model"
	MetaUpstreamSignature = "svc/upstream-signature"
)

// Decider evaluates the policy for one call. It never fails: an evaluation error is a
// deny with the error recorded (SPEC.md, "Policy request and decision").
type Decider interface {
	Decide(ctx context.Context, req PolicyRequest) PolicyDecision
}

// PolicyRequest is one call as the policy sees it.
type PolicyRequest struct {
	Agent  string
	Tool   string
	Args   json.RawMessage            // claimed
	Facts  map[string]json.RawMessage // observed, by fact name
	Grant  GrantContext               // attested
	Digest string                     // hex SHA-256 of the policy text
}

// GrantContext is context.grant.
type GrantContext struct {
	Principal string   `json:"principal"`
	Scopes    []string `json:"scopes"`
}

// PolicyDecision is the outcome of a policy evaluation.
type PolicyDecision struct {
	Decision string   // receipt.Allow or receipt.Deny
	Reasons  []string // ids of deciding policies
	Errors   []string // evaluation errors
}

// Gateway is the call path shared by the stdio and HTTP front ends.
type Gateway struct {
	cfg           *Config
	key           *signer.Key
	issuer        *receipt.Issuer
	principalKeys []signer.PublicKey
	policy        Decider
	policyDigest  string
	upstreams     []Upstream
	owner         map[string]Upstream // tool → the one upstream offering it
	multi         bool
	log           *slog.Logger
	now           func() time.Time
	onReceipt     func(*receipt.Bundle) // exporters; nil: none
	closers       []func() error
	nc            *nats.Conn             // the log's NATS connection, when the log is over NATS
	leafFits      func(leaf []byte) bool // a capped remote log keeping whole leaves; nil otherwise
}

// Session is one agent connection: its grant, and the facts upstreams declared to it.
type Session struct {
	ID        string // MCP session id over HTTP; "" on stdio
	grant     *receipt.Envelope
	chain     *receipt.Chain
	principal signer.PublicKey
	grantKey  [32]byte // HTTP: SHA-256 of the grant presented on initialize

	mu       sync.Mutex
	consumed []string // fact ids declared via svc/facts, in order, without repeats
}

// Agent is the agent the session's grant names.
func (s *Session) Agent() string { return s.chain.Leaf().Agent }

// NewSession verifies a grant (trusted principal keys, chain rules, validity window)
// and opens a session under it.
func (g *Gateway) NewSession(id string, grant *receipt.Envelope) (*Session, error) {
	v, err := g.verifyGrant(grant)
	if err != nil {
		return nil, err
	}
	return g.sessionFor(id, v)
}

// verifiedGrant is a grant whose signatures, trusted root and chain rules were
// checked; only its validity window changes with time. Read-only.
type verifiedGrant struct {
	env       *receipt.Envelope
	chain     *receipt.Chain
	principal signer.PublicKey
	agentKey  *signer.PublicKey // the leaf grant's agentKey; nil when it names none
}

func (g *Gateway) verifyGrant(grant *receipt.Envelope) (*verifiedGrant, error) {
	chain, key, err := receipt.VerifyGrant(grant, g.principalKeys, g.now())
	if err != nil {
		return nil, err
	}
	v := &verifiedGrant{env: grant, chain: chain, principal: key}
	if ak := chain.Leaf().AgentKey; ak != "" {
		pk, err := signer.ParsePublicKeyPEM([]byte(ak))
		if err != nil {
			return nil, fmt.Errorf("agentKey: %w", err)
		}
		v.agentKey = &pk
	}
	return v, nil
}

// sessionFor opens a session under a verified grant if every grant of its chain is
// within its validity window now.
func (g *Gateway) sessionFor(id string, v *verifiedGrant) (*Session, error) {
	if err := g.inWindow(v.chain); err != nil {
		return nil, err
	}
	return &Session{ID: id, grant: v.env, chain: v.chain, principal: v.principal}, nil
}

// inWindow checks that every grant of a chain is within its validity window now.
func (g *Gateway) inWindow(c *receipt.Chain) error {
	now := g.now()
	for _, gr := range c.Grants {
		if err := gr.ValidAt(now); err != nil {
			return err
		}
	}
	return nil
}

// ToolsFor lists the upstreams' tools the session's grant names, unchanged.
func (g *Gateway) ToolsFor(s *Session) []mcp.Tool {
	var all []mcp.Tool
	for _, u := range g.upstreams {
		all = append(all, u.Tools()...)
	}
	return grantedTools(s, all)
}

// Call runs one tool call through the gateway and returns what the agent gets.
// Refusals are tool errors, never protocol errors.
func (g *Gateway) Call(ctx context.Context, s *Session, tool string, args json.RawMessage, agentMeta map[string]any) *mcp.CallToolResult {
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	// The grant's window is checked on every call, not only when the session opened:
	// a receipt issued outside it would not verify, so none is issued and nothing is
	// forwarded. (Over HTTP the front refuses such a request with 403 before this.)
	if err := g.inWindow(s.chain); err != nil {
		return errorResult(fmt.Sprintf("Denied: the grant is no longer valid (%v); nothing was forwarded and no receipt was issued: a receipt outside the grant's window would not verify. Present a current grant.", err))
	}
	// Arguments that cannot be recorded are refused before anything else happens.
	if _, err := receipt.CanonicalizeJSON(args); err != nil {
		return errorResult(fmt.Sprintf("Refused: the arguments of %s are not valid JSON (%v); nothing was forwarded and no receipt was issued, since a receipt cannot record them. Send a JSON object of UTF-8 text.", tool, err))
	}
	leaf := s.chain.Leaf()
	root := s.chain.Root()
	principal := root.Principal
	call := receipt.Call{
		Principal:  receipt.Principal{ID: &principal, KeyID: s.principal.KeyID, Provenance: receipt.Attested},
		Agent:      receipt.Agent{ID: leaf.Agent, Provenance: receipt.Attested},
		Delegation: &receipt.Delegation{Envelope: s.grant, Provenance: receipt.Attested},
		Session:    receipt.Session{ID: nilIfEmpty(s.ID), Provenance: receipt.Claimed},
		Model:      receipt.Model{ID: metaString(agentMeta, MetaModel), Provenance: receipt.Claimed},
		Tool:       receipt.Tool{Name: tool, Provenance: receipt.Observed},
		Args:       args,
		Facts:      map[string]receipt.Fact{},
	}
	up := g.owner[tool]
	if g.multi && up != nil {
		call.Tool.Upstream = up.Name()
	}
	s.mu.Lock()
	if len(s.consumed) > 0 {
		call.Consumed = &receipt.Consumed{FactIDs: slices.Clone(s.consumed), Provenance: receipt.Observed}
	}
	s.mu.Unlock()
	deny := func(p *receipt.Pending, why string) *mcp.CallToolResult {
		return g.finishDenied(ctx, p, why, call.Policy.Reasons)
	}
	// 2. Arguments: a JSON object (SPEC: tools/call { name, arguments }). Anything
	// else is refused with a denied receipt that records what was sent.
	if kind := jsonKind(args); kind != "object" {
		call.Policy = g.policyRecord(PolicyDecision{Decision: receipt.Deny, Reasons: []string{"arguments are not a JSON object"}})
		p, err := g.issuer.Begin(call)
		if err != nil {
			return errorResult(fmt.Sprintf("Refused: the arguments of %s cannot be recorded: %v; nothing was forwarded", tool, err))
		}
		return deny(p, fmt.Sprintf("Refused: the arguments of %s must be a JSON object, got %s; nothing was forwarded", tool, kind))
	}
	// 3. Scope.
	if !leaf.HasScope(tool) || up == nil {
		why := fmt.Sprintf("tool %s is outside the grant's scopes", tool)
		if leaf.HasScope(tool) {
			why = fmt.Sprintf("no upstream offers tool %s", tool)
		}
		call.Policy = g.policyRecord(PolicyDecision{Decision: receipt.Deny, Reasons: []string{"outside delegated scope"}})
		p, err := g.issuer.Begin(call)
		if err != nil {
			return errorResult(err.Error())
		}
		return deny(p, why)
	}
	p, err := g.issuer.Begin(call)
	if err != nil {
		return errorResult(fmt.Sprintf("Refused: the call cannot be recorded: %v; nothing was forwarded", err))
	}
	meta := map[string]any{MetaReceipt: p.ReceiptID, MetaAgent: leaf.Agent, MetaPrincipal: principal}
	// 4. Facts.
	facts, factValues, why := g.lookupFacts(ctx, tool, args, meta)
	call.Facts = facts
	if why != "" {
		call.Policy = g.policyRecord(PolicyDecision{Decision: receipt.Deny, Reasons: []string{"fact lookup failed"}})
		if p, err = g.issuer.Resume(p, call); err != nil {
			return errorResult(err.Error())
		}
		return deny(p, why)
	}
	// 5. Policy.
	dec := g.policy.Decide(ctx, PolicyRequest{Agent: leaf.Agent, Tool: tool, Args: args, Facts: factValues,
		Grant: GrantContext{Principal: leaf.Principal, Scopes: leaf.Scopes}, Digest: g.policyDigest})
	call.Policy = g.policyRecord(dec)
	if p, err = g.issuer.Resume(p, call); err != nil {
		return errorResult(err.Error())
	}
	if dec.Decision != receipt.Allow {
		return deny(p, "")
	}
	// 6. Pre-commit, once the receipt is known to fit the log.
	if why := g.checkReceiptFits(p, tool); why != "" {
		return errorResult(why)
	}
	if g.cfg.IsPrecommit(tool) {
		if err := g.issuer.Authorize(ctx, p); err != nil {
			reason := "Not executed: the log did not commit the authorization: " + err.Error()
			b, ferr := g.issuer.Finish(ctx, p, receipt.Execution{Status: receipt.StatusWithheld, Reason: reason, Provenance: receipt.Observed})
			if ferr != nil {
				g.log.Warn("withheld receipt not logged either", "receipt", p.ReceiptID, "err", ferr)
			} else {
				g.exported(b)
			}
			return errorResult(fmt.Sprintf("%s (receipt %s)", reason, p.ReceiptID))
		}
	}
	// 7. Forward, with the meta keys the agent cannot set.
	fwd := map[string]any{}
	for k, v := range agentMeta {
		if !strings.HasPrefix(k, "svc/") {
			fwd[k] = v
		}
	}
	maps(fwd, meta)
	if len(factValues) > 0 {
		obs := map[string]any{}
		for k, v := range factValues {
			obs[k] = json.RawMessage(v)
		}
		fwd[MetaObserved] = obs
	}
	res, callErr := up.Call(ctx, tool, args, fwd)
	var exec receipt.Execution
	if callErr != nil {
		exec = receipt.Execution{Status: receipt.StatusError, Error: callErr.Error(), Provenance: receipt.Observed}
	} else {
		raw, err := json.Marshal(res)
		if err != nil {
			raw = json.RawMessage(`null`)
		}
		exec = receipt.Execution{Status: receipt.StatusExecuted, Result: raw, Provenance: receipt.Observed}
		if res.IsError {
			exec.Status = receipt.StatusFailed
		}
		if res.Meta != nil {
			if sig, ok := res.Meta.AdditionalFields[MetaUpstreamSignature]; ok {
				if b, err := json.Marshal(sig); err == nil {
					exec.Upstream = b
				}
			}
			// 8. Facts the upstream declares it served.
			if ids, ok := res.Meta.AdditionalFields[MetaFacts].([]any); ok {
				s.mu.Lock()
				for _, id := range ids {
					if str, ok := id.(string); ok && !slices.Contains(s.consumed, str) {
						s.consumed = append(s.consumed, str)
					}
				}
				s.mu.Unlock()
			}
		}
	}
	// 9. The receipt, then the result.
	b, err := g.issuer.Finish(ctx, p, exec)
	if err != nil {
		g.log.Error("receipt not logged after the upstream acted", "receipt", p.ReceiptID, "tool", tool, "err", err)
		return errorResult(fmt.Sprintf("The upstream action has already happened, but the log did not take its receipt, so no receipt was issued: %v", err))
	}
	g.exported(b)
	if callErr != nil {
		return errorResult(fmt.Sprintf("Upstream error: %s (receipt %s)", callErr.Error(), p.ReceiptID))
	}
	if res.Meta == nil {
		res.Meta = &mcp.Meta{}
	}
	if res.Meta.AdditionalFields == nil {
		res.Meta.AdditionalFields = map[string]any{}
	}
	res.Meta.AdditionalFields[MetaReceipt] = p.ReceiptID
	return res
}

// jsonKind names the kind of a valid JSON value: object, array, string, number,
// boolean or null.
func jsonKind(v json.RawMessage) string {
	b := bytes.TrimLeft(v, " \t\r\n")
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func maps(dst, src map[string]any) {
	for k, v := range src {
		dst[k] = v
	}
}

func (g *Gateway) finishDenied(ctx context.Context, p *receipt.Pending, why string, reasons []string) *mcp.CallToolResult {
	if why == "" {
		why = "Denied by policy: " + reasonText(reasons)
	}
	b, err := g.issuer.Finish(ctx, p, receipt.Execution{Status: receipt.StatusDenied, Reason: why, Provenance: receipt.Observed})
	if err != nil {
		g.log.Warn("denied receipt not logged", "receipt", p.ReceiptID, "err", err)
		return errorResult(fmt.Sprintf("Denied by policy: %s (no receipt: the log did not take it: %v)", reasonText(reasons), err))
	}
	g.exported(b)
	return errorResult(fmt.Sprintf("Denied by policy: %s (receipt %s)", reasonText(reasons), p.ReceiptID))
}

func reasonText(reasons []string) string {
	if len(reasons) == 0 {
		return "no policy permits this call"
	}
	return strings.Join(reasons, ", ")
}

func (g *Gateway) policyRecord(d PolicyDecision) *receipt.Policy {
	if d.Reasons == nil {
		d.Reasons = []string{}
	}
	if d.Errors == nil {
		d.Errors = []string{}
	}
	if d.Decision != receipt.Allow {
		d.Decision = receipt.Deny
	}
	return &receipt.Policy{Decision: d.Decision, Reasons: d.Reasons, Errors: d.Errors, PolicyDigest: g.policyDigest, Provenance: receipt.Observed}
}

func (g *Gateway) exported(b *receipt.Bundle) {
	if g.onReceipt != nil {
		g.onReceipt(b)
	}
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(text)}, IsError: true}
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func metaString(m map[string]any, key string) *string {
	if v, ok := m[key].(string); ok && v != "" {
		return &v
	}
	return nil
}

// PolicyDigest is the hex SHA-256 of the policy text.
func PolicyDigest(text []byte) string {
	s := sha256.Sum256(text)
	return hex.EncodeToString(s[:])
}
