package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"svc.dev/svc/exporters"
	"svc.dev/svc/gateway/upstream"
	"svc.dev/svc/pipeline"
)

// MaxConfigSize caps the config file.
const MaxConfigSize = 1 << 20

// Config is the gateway config file (SPEC.md, "Gateway config"), a JSON object of at
// most MaxConfigSize bytes; unknown fields are refused. Every path is resolved against
// the directory of the config file when it is relative.
type Config struct {
	// Identity.KeyFile is the gateway's Ed25519 private key (PKCS#8 PEM, mode 0600);
	// it signs every receipt and authorization. Required.
	Identity struct {
		KeyFile string `json:"keyFile"`
	} `json:"identity"`

	// Upstream is the one MCP server or REST API behind the gateway; Upstreams lists
	// several, each with a Name, and every tool name must belong to exactly one of
	// them (checked at start). Exactly one of Upstream and Upstreams is required.
	Upstream  *UpstreamConfig  `json:"upstream,omitempty"`
	Upstreams []UpstreamConfig `json:"upstreams,omitempty"`

	// GrantFile is the grant a stdio gateway serves (the agent's delegation). Optional;
	// ignored over HTTP, where each agent presents its own grant.
	GrantFile string `json:"grantFile,omitempty"`

	// TrustedPrincipalKeys are public key files (SPKI PEM) of the principals whose
	// grants are accepted, matched by keyid. Required, at least one.
	TrustedPrincipalKeys []string `json:"trustedPrincipalKeys"`

	// PolicyFile is the Cedar policy every call is decided by; its SHA-256 is in every
	// receipt. Required.
	PolicyFile string `json:"policyFile"`

	// Facts are lookups the gateway makes itself before deciding. Optional.
	Facts []FactConfig `json:"facts,omitempty"`

	// Precommit lists consequential tools, whose signed authorization is logged before
	// the call is forwarded, or the single entry "*" for all. Optional; default none.
	Precommit []string `json:"precommit,omitempty"`

	// PassThrough names the MCP features besides tools that the gateway passes
	// between agent and upstream unchanged, unenforced and without receipts:
	// "resources" (resources/list, resources/templates/list, resources/read,
	// resources/subscribe, resources/unsubscribe), "prompts" (prompts/list,
	// prompts/get) and "completion" (completion/complete). A session gets one only
	// when its grant's scopes also name it (a scope "resources", "prompts" or
	// "completion"). The requests reach the MCP upstreams that declare the feature:
	// with more than one, a list is the union of theirs in one page, and a request
	// naming a resource, template or prompt goes to the one upstream whose list
	// names it (refused when two or none do; passthrough.go). Optional; default
	// none: SPEC scopes the gateway to tools, and the agent is then told of no such
	// capability.
	PassThrough []string `json:"passThrough,omitempty"`

	// ToolPins says what a changed tool definition does (every upstream's tools are
	// logged as a tool-definitions statement at start and on each change, whatever
	// this says): "off" records only; "first-seen" pins each tool to the first
	// definition logged for it (in this receipts directory) and denies calls to a
	// tool whose definition differs, the agent's tools/list showing the pinned
	// definition; any other value is a file of digests an operator reviewed,
	// {"tools": {"<tool>": "<sha256 of its canonical definition>"}}, relative to this
	// file, pinning those tools (a tool it does not name is not offered). Optional;
	// default "off".
	ToolPins string `json:"toolPins,omitempty"`

	// ReceiptsDir receives <receiptId>.json per receipt and
	// <receiptId>.authorization.json per pre-committed call; created when absent.
	// Required.
	ReceiptsDir string `json:"receiptsDir"`

	// LogFile is a local Merkle log file (SPEC.md's log file format), created when
	// absent; Log is a remote log. Exactly one of the two is required.
	LogFile string           `json:"logFile,omitempty"`
	Log     *RemoteLogConfig `json:"log,omitempty"`

	// Config holds the exporters' fields, one per kind of exporter (package
	// exporters owns the list): otel, { url, headersEnv?, serviceName? }, exports every
	// receipt as an OTLP/HTTP span; splunk, { url, tokenEnv, index?, source?,
	// sourcetype?, host? }, to an HTTP Event Collector. All optional. An export never
	// blocks or fails a receipt.
	exporters.Config

	dir string // the config file's directory
}

// UpstreamConfig, RestConfig and RestTool are package upstream's, where the
// upstreams they describe are dialled.
type (
	UpstreamConfig = upstream.Config
	RestConfig     = upstream.RestConfig
	RestTool       = upstream.RestTool
)

// FactConfig is a lookup the gateway makes before deciding.
type FactConfig struct {
	// Name is the key under context.facts in the policy request. Required.
	Name string `json:"name"`
	// Tool is the upstream tool called for the fact. Required.
	Tool string `json:"tool"`
	// Args are the tool's arguments; a string "$args.<key>" copies the agent's
	// argument <key>. Optional; default none.
	Args json.RawMessage `json:"args"`
	// ForTools are the intercepted tools whose calls trigger the lookup. Required.
	ForTools []string `json:"forTools"`
	// Optional skips the lookup when an argument it copies is absent; the fact is then
	// absent, which a policy tests with has. Default false: an absent argument or a
	// failed lookup denies the call.
	Optional bool `json:"optional,omitempty"`
}

// RemoteLogConfig is a remote log (pipeline.LogConfig: a log server over HTTP, URL,
// or the pipeline's request/reply over NATS, NATS; exactly one of the two) and what
// the gateway does with a receipt larger than one append takes.
type RemoteLogConfig struct {
	pipeline.LogConfig
	// Oversize says what happens to a call whose receipt is larger than the log takes
	// in one append (64 KB) before its result is added: "refuse" (the default) refuses
	// it before forwarding, with no receipt; "hash" forwards it and appends its receipt
	// by hash (the bundle file is the full copy). A result that brings a receipt over
	// the cap after the upstream acted is always appended by hash. Ignored with
	// HashOnly. Optional.
	Oversize string `json:"oversize,omitempty"`
}

// LoadConfig reads and checks a config file.
func LoadConfig(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, MaxConfigSize+1)); err != nil {
		return nil, err
	}
	if buf.Len() > MaxConfigSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, MaxConfigSize)
	}
	c, err := ParseConfig(buf.Bytes(), filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses a config and checks everything that does not need the outside
// world (files and environment variables are checked when the gateway starts).
func ParseConfig(data []byte, dir string) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c.dir = dir
	var p problems
	if c.Identity.KeyFile == "" {
		p.add("identity.keyFile is required")
	}
	c.checkUpstreams(&p)
	if len(c.TrustedPrincipalKeys) == 0 {
		p.add("trustedPrincipalKeys must name at least one principal public key")
	}
	if c.PolicyFile == "" {
		p.add("policyFile is required")
	}
	if c.ReceiptsDir == "" {
		p.add("receiptsDir is required")
	}
	c.checkLog(&p)
	c.checkFacts(&p)
	for i, f := range c.PassThrough {
		if !slices.Contains(passThroughFeatures, f) {
			p.add("passThrough[%d]: %q is not one of resources, prompts, completion", i, f)
		}
	}
	for i, pc := range c.Precommit {
		if pc == "*" && len(c.Precommit) > 1 {
			p.add("precommit[%d]: \"*\" must be the only entry", i)
		}
	}
	if len(p) > 0 {
		return nil, errors.Join(p...)
	}
	return &c, nil
}

// problems collects every fault of a config, so one run names them all.
type problems []error

func (p *problems) add(format string, a ...any) { *p = append(*p, fmt.Errorf(format, a...)) }

// checkUpstreams: exactly one of upstream and upstreams; several upstreams need
// distinct names.
func (c *Config) checkUpstreams(p *problems) {
	switch {
	case c.Upstream != nil && len(c.Upstreams) > 0:
		p.add("give upstream or upstreams, not both")
	case c.Upstream == nil && len(c.Upstreams) == 0:
		p.add("one of upstream or upstreams is required")
	case c.Upstream != nil:
		if err := c.Upstream.Check("upstream"); err != nil {
			*p = append(*p, err)
		}
	default:
		names := map[string]bool{}
		for i := range c.Upstreams {
			u := &c.Upstreams[i]
			field := fmt.Sprintf("upstreams[%d]", i)
			if u.Name == "" {
				p.add("%s.name is required when several upstreams are configured", field)
			} else if names[u.Name] {
				p.add("%s.name %q is used twice", field, u.Name)
			}
			names[u.Name] = true
			if err := u.Check(field); err != nil {
				*p = append(*p, err)
			}
		}
	}
}

// passThroughFeatures are the features Config.PassThrough may name (passthrough.go).
var passThroughFeatures = []string{"resources", "prompts", "completion"}

// checkLog: exactly one of logFile and log; a remote log is checked by
// pipeline.LogConfig.Check, the SDK's check (one transport, a URL of its kind, a
// positive timeoutMs, a tokenEnv that can name a variable), plus the gateway's own
// oversize.
func (c *Config) checkLog(p *problems) {
	switch {
	case c.LogFile != "" && c.Log != nil:
		p.add("give logFile or log, not both")
	case c.LogFile == "" && c.Log == nil:
		p.add("one of logFile or log is required")
	case c.Log != nil:
		if err := c.Log.LogConfig.Check(); err != nil {
			*p = append(*p, err)
		}
		if o := c.Log.Oversize; o != "" && o != OversizeRefuse && o != OversizeHash {
			p.add("log.oversize %q: want %q or %q", o, OversizeRefuse, OversizeHash)
		}
	}
}

// checkFacts: every fact names itself, its lookup tool and the tools it serves; its
// fixed arguments are JSON.
func (c *Config) checkFacts(p *problems) {
	for i, f := range c.Facts {
		field := fmt.Sprintf("facts[%d]", i)
		if f.Name == "" || f.Tool == "" {
			p.add("%s: name and tool are required", field)
		}
		if len(f.ForTools) == 0 {
			p.add("%s.forTools names no tool", field)
		}
		if len(f.Args) > 0 {
			var v any
			if err := json.Unmarshal(f.Args, &v); err != nil {
				p.add("%s.args: %w", field, err)
			}
		}
	}
}

// Path resolves p against the config file's directory.
func (c *Config) Path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.dir, p)
}

// IsPrecommit reports whether tool must be logged before it is forwarded.
func (c *Config) IsPrecommit(tool string) bool {
	for _, p := range c.Precommit {
		if p == "*" || p == tool {
			return true
		}
	}
	return false
}
