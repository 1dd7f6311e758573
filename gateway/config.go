package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// MaxConfigSize caps the config file.
const MaxConfigSize = 1 << 20

// Config is the gateway config file (SPEC.md, "Gateway config"). Relative paths
// resolve against the config file's directory.
type Config struct {
	Identity struct {
		KeyFile string `json:"keyFile"` // the gateway's Ed25519 private key; signs every receipt
	} `json:"identity"`
	// Upstream is one upstream; Upstreams several, each with a name. Exactly one of
	// the two.
	Upstream  *UpstreamConfig  `json:"upstream,omitempty"`
	Upstreams []UpstreamConfig `json:"upstreams,omitempty"`
	// GrantFile is the grant a stdio gateway serves (ignored over HTTP).
	GrantFile            string       `json:"grantFile,omitempty"`
	TrustedPrincipalKeys []string     `json:"trustedPrincipalKeys"`
	PolicyFile           string       `json:"policyFile"`
	Facts                []FactConfig `json:"facts,omitempty"`
	// Precommit lists consequential tools, or the single entry "*" for all.
	Precommit   []string         `json:"precommit,omitempty"`
	ReceiptsDir string           `json:"receiptsDir"`
	LogFile     string           `json:"logFile,omitempty"` // exactly one of LogFile and Log
	Log         *RemoteLogConfig `json:"log,omitempty"`
	Otel        json.RawMessage  `json:"otel,omitempty"`   // OTLP/HTTP export; see package exporters
	Splunk      json.RawMessage  `json:"splunk,omitempty"` // HTTP event collector export

	dir string // the config file's directory
}

// UpstreamConfig is one of SPEC's three upstream shapes.
type UpstreamConfig struct {
	Name string `json:"name,omitempty"` // required in upstreams
	// Command spawns an MCP server over stdio; Env is passed to it and never shown
	// to the agent.
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// URL connects to an MCP server over Streamable HTTP with a bearer token taken
	// from the environment variable TokenEnv.
	URL      string `json:"url,omitempty"`
	TokenEnv string `json:"tokenEnv,omitempty"`
	// Rest describes a plain HTTP API as tools.
	Rest *RestConfig `json:"rest,omitempty"`
}

// RestConfig is SPEC's REST upstream description.
type RestConfig struct {
	BaseURL   string            `json:"baseUrl"`
	HeaderEnv map[string]string `json:"headerEnv,omitempty"` // header → env var, read at startup
	Headers   map[string]string `json:"headers,omitempty"`
	TimeoutMs int               `json:"timeoutMs,omitempty"`
	Tools     []RestTool        `json:"tools"`
}

// RestTool is one REST endpoint offered as a tool.
type RestTool struct {
	Name        string          `json:"name"`
	Method      string          `json:"method"`
	Path        string          `json:"path"` // {name} segments are filled from arguments
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	Description string          `json:"description,omitempty"`
	Body        string          `json:"body,omitempty"`  // "none": send no body
	Query       []string        `json:"query,omitempty"` // arguments that go to the query string
}

// FactConfig is a lookup the gateway makes before deciding.
type FactConfig struct {
	Name     string          `json:"name"`     // key under context.facts
	Tool     string          `json:"tool"`     // upstream tool to call
	Args     json.RawMessage `json:"args"`     // template: "$args.<key>" copies the agent's argument
	ForTools []string        `json:"forTools"` // intercepted tools that trigger it
	Optional bool            `json:"optional,omitempty"`
}

// RemoteLogConfig is a remote log.
type RemoteLogConfig struct {
	URL       string `json:"url,omitempty"`      // the tenant's append URL
	TokenEnv  string `json:"tokenEnv,omitempty"` // environment variable holding the bearer token
	HashOnly  bool   `json:"hashOnly,omitempty"`
	TimeoutMs int    `json:"timeoutMs,omitempty"` // one append; default 10000
	// Oversize: what happens to a call whose receipt is larger than the log takes in
	// one append (64 KB) before its result is added. "refuse" (default): refused before
	// forwarding, with no receipt. "hash": forwarded, its receipt appended by hash (the
	// bundle file is the full copy). A result that brings a receipt over the cap after
	// the upstream acted is always appended by hash. Ignored with hashOnly.
	Oversize string `json:"oversize,omitempty"`
	// NATS appends over the pipeline's request/reply instead of HTTP (fleets).
	NATS   string `json:"nats,omitempty"`
	Tenant string `json:"tenant,omitempty"` // with NATS; default "default"
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
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Identity.KeyFile == "" {
		bad("identity.keyFile is required")
	}
	switch {
	case c.Upstream != nil && len(c.Upstreams) > 0:
		bad("give upstream or upstreams, not both")
	case c.Upstream == nil && len(c.Upstreams) == 0:
		bad("one of upstream or upstreams is required")
	case c.Upstream != nil:
		if err := c.Upstream.check("upstream"); err != nil {
			errs = append(errs, err)
		}
	default:
		names := map[string]bool{}
		for i := range c.Upstreams {
			u := &c.Upstreams[i]
			field := fmt.Sprintf("upstreams[%d]", i)
			if u.Name == "" {
				bad("%s.name is required when several upstreams are configured", field)
			} else if names[u.Name] {
				bad("%s.name %q is used twice", field, u.Name)
			}
			names[u.Name] = true
			if err := u.check(field); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(c.TrustedPrincipalKeys) == 0 {
		bad("trustedPrincipalKeys must name at least one principal public key")
	}
	if c.PolicyFile == "" {
		bad("policyFile is required")
	}
	if c.ReceiptsDir == "" {
		bad("receiptsDir is required")
	}
	switch {
	case c.LogFile != "" && c.Log != nil:
		bad("give logFile or log, not both")
	case c.LogFile == "" && c.Log == nil:
		bad("one of logFile or log is required")
	case c.Log != nil:
		if (c.Log.URL == "") == (c.Log.NATS == "") {
			bad("log needs exactly one of log.url and log.nats")
		}
		if c.Log.URL != "" && !strings.HasPrefix(c.Log.URL, "http://") && !strings.HasPrefix(c.Log.URL, "https://") {
			bad("log.url %q: want the tenant's http(s) append URL", c.Log.URL)
		}
		if o := c.Log.Oversize; o != "" && o != OversizeRefuse && o != OversizeHash {
			bad("log.oversize %q: want %q or %q", o, OversizeRefuse, OversizeHash)
		}
		if c.Log.TimeoutMs < 0 {
			bad("log.timeoutMs must be positive")
		}
	}
	for i, f := range c.Facts {
		field := fmt.Sprintf("facts[%d]", i)
		if f.Name == "" || f.Tool == "" {
			bad("%s: name and tool are required", field)
		}
		if len(f.ForTools) == 0 {
			bad("%s.forTools names no tool", field)
		}
		if len(f.Args) > 0 {
			var v any
			if err := json.Unmarshal(f.Args, &v); err != nil {
				bad("%s.args: %v", field, err)
			}
		}
	}
	for i, p := range c.Precommit {
		if p == "*" && len(c.Precommit) > 1 {
			bad("precommit[%d]: \"*\" must be the only entry", i)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &c, nil
}

func (u *UpstreamConfig) check(field string) error {
	shapes := 0
	for _, b := range []bool{u.Command != "", u.URL != "", u.Rest != nil} {
		if b {
			shapes++
		}
	}
	if shapes != 1 {
		return fmt.Errorf("%s: give exactly one of command, url and rest", field)
	}
	if u.Rest != nil {
		r := u.Rest
		if !strings.HasPrefix(r.BaseURL, "http://") && !strings.HasPrefix(r.BaseURL, "https://") {
			return fmt.Errorf("%s.rest.baseUrl %q: want an http(s) URL", field, r.BaseURL)
		}
		if len(r.Tools) == 0 {
			return fmt.Errorf("%s.rest.tools: no tools", field)
		}
		for i, t := range r.Tools {
			if t.Name == "" || t.Path == "" {
				return fmt.Errorf("%s.rest.tools[%d]: name and path are required", field, i)
			}
			switch strings.ToUpper(t.Method) {
			case "GET", "POST", "PUT", "PATCH", "DELETE":
			default:
				return fmt.Errorf("%s.rest.tools[%d].method %q: want GET, POST, PUT, PATCH or DELETE", field, i, t.Method)
			}
			if t.Body != "" && t.Body != "none" {
				return fmt.Errorf("%s.rest.tools[%d].body %q: the only value is \"none\"", field, i, t.Body)
			}
		}
	}
	return nil
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
