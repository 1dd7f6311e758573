package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
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

// maxMCPBody caps one MCP request body; maxBodyBytes caps the bodies of all requests
// held in memory at once (64 bodies at the cap, many more small ones). A request that
// cannot reserve room within the body read timeout gets 503 with Retry-After.
const (
	maxMCPBody   = 4 << 20
	maxBodyBytes = 256 << 20
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
	routes        router // the upstreams and which one each tool goes to (routes.go)
	multi         bool
	log           *slog.Logger
	now           func() time.Time
	onReceipt     func(*receipt.Bundle) // exporters; nil: none
	closers       []func() error
	nc            *nats.Conn             // the log's NATS connection, when the log is over NATS
	leafFits      func(leaf []byte) bool // a capped remote log keeping whole leaves; nil otherwise
	fastCalls     atomic.Int64           // tool calls the fronts' fast paths answered
	defs          *toolDefs              // the upstreams' tool definitions and their pins (tooldefs.go)
	passed        passIndex              // which upstream lists each passed-through resource and prompt (passindex.go)
}

// ToolDefinitionChanges is how many tool definitions changed since the gateway started.
func (g *Gateway) ToolDefinitionChanges() int64 { return g.defs.changes.Load() }

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
