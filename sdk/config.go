package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"svc.dev/svc/exporters"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// MaxConfigSize caps a config file.
const MaxConfigSize = 1 << 20

// Config is the SDK config file, the same file the sidecar (svc serve) reads (see
// docs/sdk-config.md): a JSON object of at most MaxConfigSize bytes; unknown fields are
// refused. Every path is resolved against the directory of the config file when it is
// relative.
type Config struct {
	// Identity.KeyFile is the issuer's Ed25519 private key; it signs every receipt.
	// Required.
	Identity Identity `json:"identity"`
	// AgentID names the agent in every receipt (claimed). Required.
	AgentID string `json:"agentId"`
	// PrincipalID names the principal the agent acts for (claimed). Optional; absent
	// or null records principal.id null.
	PrincipalID *string `json:"principalId,omitempty"`
	// Framework names the agent framework (e.g. "langchain"), recorded in receipts.
	// Required.
	Framework string `json:"framework"`
	// PolicyFile is a Cedar policy evaluated before each call; its SHA-256 is in every
	// receipt. Optional; without it receipts carry no policy decision of their own.
	PolicyFile string `json:"policyFile,omitempty"`
	// ReceiptsDir receives <receiptId>.json per receipt; created when absent.
	// Required.
	ReceiptsDir string `json:"receiptsDir"`
	// LogFile is a local Merkle log file, created when absent; Log is a remote log.
	// Exactly one of the two is required.
	LogFile string     `json:"logFile,omitempty"`
	Log     *LogConfig `json:"log,omitempty"`
	// Config holds the exporters' fields (otel, splunk: package exporters owns the
	// list of kinds), exactly as the gateway config's. All optional; an export never
	// blocks or fails a receipt.
	exporters.Config
}

// Identity names the issuer's key.
type Identity struct {
	// KeyFile is an Ed25519 private key, PKCS#8 PEM as svc keygen writes it (mode
	// 0600). Required.
	KeyFile string `json:"keyFile"`
}

// LogConfig is a remote log: over HTTP ({ url, tokenEnv?, hashOnly?, timeoutMs? }, the
// gateway's shape) or over the pipeline's NATS ({ nats, tenant?, tokenEnv?, hashOnly?,
// timeoutMs? }); the gateway's config holds the same (pipeline.LogConfig, which
// OpenLog opens for both). Exactly one of URL and NATS.
type LogConfig = pipeline.LogConfig

// Exporters is the config's exporters' fields.
func (c *Config) Exporters() exporters.Config { return c.Config }

// LoadConfig reads and checks a config file.
func LoadConfig(path string) (*Config, error) {
	data, err := receipt.ReadFileCapped(path, MaxConfigSize)
	if err != nil {
		return nil, fmt.Errorf("sdk config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(data, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("sdk config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig checks a config's text and resolves its relative paths against dir. It
// touches neither files nor the environment (Open does); every error names the field.
func ParseConfig(data []byte, dir string) (*Config, error) {
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("config is larger than %d bytes", MaxConfigSize)
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF):
			return nil, errors.New("config is empty; want a JSON object")
		case errors.As(err, &te) && te.Field != "":
			return nil, fmt.Errorf("%s: want %s, got %s", te.Field, te.Type, te.Value)
		}
		return nil, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the JSON object")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	resolve := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	resolve(&c.Identity.KeyFile)
	resolve(&c.PolicyFile)
	resolve(&c.ReceiptsDir)
	resolve(&c.LogFile)
	return &c, nil
}

func (c *Config) check() error {
	switch {
	case c.Identity.KeyFile == "":
		return errors.New("identity.keyFile is required: the issuer's private key file (svc keygen writes one)")
	case strings.TrimSpace(c.AgentID) == "":
		return errors.New("agentId is required: the id the agent's receipts name (claimed)")
	case c.PrincipalID != nil && strings.TrimSpace(*c.PrincipalID) == "":
		return errors.New("principalId is empty; leave it out (recorded as null) or name the principal")
	case strings.TrimSpace(c.Framework) == "":
		return errors.New("framework is required: the host agent framework, recorded as issuer.framework")
	case c.ReceiptsDir == "":
		return errors.New("receiptsDir is required: where <receiptId>.json files are written")
	case c.LogFile != "" && c.Log != nil:
		return errors.New("both logFile and log are set; give exactly one (a local log file, or a remote log)")
	case c.LogFile == "" && c.Log == nil:
		return errors.New("neither logFile nor log is set; give exactly one (a local log file, or a remote log)")
	}
	if l := c.Log; l != nil {
		if err := l.Check(); err != nil {
			return err
		}
	}
	return c.Exporters().Validate()
}
