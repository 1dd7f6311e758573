package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/client"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// LogConfig is a producer's remote receipt log, the `log` member of a gateway config
// (SPEC.md, "Gateway config") and of an SDK config (docs/sdk-config.md): a log server
// over HTTP (URL) or this pipeline over NATS (NATS). Exactly one of URL and NATS.
// Check checks it in the words docs/sdk-config.md gives; OpenLog opens it.
type LogConfig struct {
	// URL is the tenant's append URL, e.g. https://log.example/t/acme/append.
	URL string `json:"url,omitempty"`
	// NATS is a NATS server URL (nats://, tls://, ws://, wss://) where the log's
	// sequencer runs, e.g. nats://127.0.0.1:4222, instead of URL.
	NATS string `json:"nats,omitempty"`
	// Tenant is the tenant appended to over NATS. Optional; default "default".
	Tenant string `json:"tenant,omitempty"`
	// TokenEnv names the environment variable holding the bearer token (with URL) or
	// the NATS auth token (with NATS), read once at start; unset fails the start.
	// Optional.
	TokenEnv string `json:"tokenEnv,omitempty"`
	// HashOnly sends only the leaf hash; the log then cannot serve the receipt.
	// Optional; default false.
	HashOnly bool `json:"hashOnly,omitempty"`
	// TimeoutMs bounds one append attempt, in milliseconds (three retries follow a
	// timeout, a 429 or a 5xx). Optional; default 10000.
	TimeoutMs *int `json:"timeoutMs,omitempty"`
}

// Check reports the first thing wrong with c, naming the field as a config's `log`
// member (log.url, log.nats, ...): exactly one of URL and NATS, an http(s) append
// URL, a NATS server URL (printed redacted), a tenant only with NATS and in the form
// client.ValidTenant takes, a positive TimeoutMs, and TokenEnv an environment
// variable's name.
func (c *LogConfig) Check() error {
	switch {
	case c.URL != "" && c.NATS != "":
		return errors.New("log: both url and nats are set; give exactly one (an HTTP log's append URL, or a NATS server)")
	case c.URL == "" && c.NATS == "":
		return errors.New("log: give url (an HTTP log's append URL) or nats (a NATS server URL)")
	case c.TimeoutMs != nil && *c.TimeoutMs <= 0:
		return fmt.Errorf("log.timeoutMs %d: want a positive number of milliseconds", *c.TimeoutMs)
	case c.TokenEnv != "" && !ValidEnvName(c.TokenEnv):
		return fmt.Errorf("log.tokenEnv %q is not an environment variable name", c.TokenEnv)
	}
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("log.url %q: want the tenant's append URL, http(s)://host/.../append", c.URL)
		}
		if c.Tenant != "" {
			return errors.New("log.tenant is only for log.nats; an HTTP log's tenant is in its URL (/t/<tenant>/append)")
		}
		return nil
	}
	u, err := url.Parse(c.NATS)
	if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss") {
		return fmt.Errorf("log.nats %q: want a NATS server URL, nats://host:4222", RedactURL(c.NATS))
	}
	if c.Tenant != "" && !client.ValidTenant(c.Tenant) {
		return fmt.Errorf("log.tenant %q: use 1 to 63 of a-z, 0-9, - and _", c.Tenant)
	}
	return nil
}

// ValidEnvName reports whether s can name an environment variable: letters, digits
// and _, not starting with a digit, not empty.
func ValidEnvName(s string) bool {
	for i, r := range s {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return s != ""
}

// DefaultAppendTimeout bounds one append attempt when LogConfig.TimeoutMs is absent.
const DefaultAppendTimeout = 10 * time.Second

// Timeout is the bound of one append attempt: TimeoutMs, or DefaultAppendTimeout when
// it is absent (or not positive, which the configs refuse).
func (c *LogConfig) Timeout() time.Duration {
	if c.TimeoutMs == nil || *c.TimeoutMs <= 0 {
		return DefaultAppendTimeout
	}
	return time.Duration(*c.TimeoutMs) * time.Millisecond
}

// The kinds of an opened log (OpenedLog.Kind; the SDK's health reports them).
const (
	LogKindFile = "file"
	LogKindHTTP = "http"
	LogKindNATS = "nats"
)

// LogOptions are what OpenLog takes besides the config.
type LogOptions struct {
	// Key signs a local log file's tree heads. Required with a file.
	Key *signer.Key
	// Name names the NATS connection (seen in the server's connection list).
	Name string
	// HTTPClient makes an HTTP log's requests. Optional; default a fresh client.
	HTTPClient *http.Client
	// Getenv reads the environment for log.tokenEnv: an unset or empty variable is an
	// error naming the field and the variable. Optional; default os.LookupEnv.
	Getenv func(string) (string, bool)
	// Env, when set, reads the variable instead of Getenv, with its own error.
	Env func(field, name string) (string, error)
}

// OpenedLog is a producer's receipt log, opened.
type OpenedLog struct {
	// Log takes the receipts' leaves.
	Log receipt.Log
	// Kind is LogKindFile, LogKindHTTP or LogKindNATS; Where names the file, the
	// append URL, or the NATS server (redacted) and tenant.
	Kind, Where string
	// NATS is the log's connection when it is over NATS (the exporters share it);
	// nil otherwise.
	NATS *nats.Conn
	// ByHash is the same remote log taking leaves by their hash, and Fits reports
	// whether one append of Log takes a leaf whole (the pipeline's cap, MaxLeafBytes).
	// Both nil for a local file and with HashOnly.
	ByHash receipt.Log
	Fits   func(leaf []byte) bool

	close func() error
}

// Close releases the log: the file, or the NATS connection.
func (l *OpenedLog) Close() error {
	if l.close == nil {
		return nil
	}
	return l.close()
}

// OpenLog opens a producer's receipt log: the local log file at file when it is set
// (created when absent), else the remote log c. Errors name the config field.
func OpenLog(file string, c *LogConfig, o LogOptions) (*OpenedLog, error) {
	if file != "" {
		fl, err := receipt.OpenFileLog(file, o.Key, "")
		if err != nil {
			return nil, fmt.Errorf("logFile: %w", err)
		}
		return &OpenedLog{Log: fl, Kind: LogKindFile, Where: file, close: fl.Close}, nil
	}
	token := ""
	if c.TokenEnv != "" {
		env := o.Env
		if env == nil {
			env = func(field, name string) (string, error) { return ConfigEnv(o.Getenv, field, name) }
		}
		v, err := env("log.tokenEnv", c.TokenEnv)
		if err != nil {
			return nil, err
		}
		token = v
	}
	if c.URL != "" {
		return openHTTPLog(c, token, o.HTTPClient)
	}
	return openNATSLog(c, token, o.Name)
}

// ConfigEnv reads the environment variable name that a config field names (the log's
// tokenEnv, an exporter's tokenEnv or headersEnv) through getenv (nil: os.LookupEnv):
// unset or empty is an error naming the field and the variable.
func ConfigEnv(getenv func(string) (string, bool), field, name string) (string, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	v, ok := getenv(name)
	if !ok || v == "" {
		return "", fmt.Errorf("%s: environment variable %s is not set", field, name)
	}
	return v, nil
}

func openHTTPLog(c *LogConfig, token string, hc *http.Client) (*OpenedLog, error) {
	open := func(hashOnly bool) (receipt.Log, error) {
		l, err := client.NewHTTPLog(client.HTTPLogConfig{URL: c.URL, Token: token, HashOnly: hashOnly, Timeout: c.Timeout(), Client: hc})
		if err != nil {
			return nil, fmt.Errorf("log.url: %w", err)
		}
		return l, nil
	}
	whole, err := open(c.HashOnly)
	if err != nil {
		return nil, err
	}
	l := &OpenedLog{Log: whole, Kind: LogKindHTTP, Where: c.URL}
	if !c.HashOnly {
		if l.ByHash, err = open(true); err != nil {
			return nil, err
		}
		l.Fits = httpAppendFits
	}
	return l, nil
}

func openNATSLog(c *LogConfig, token, name string) (*OpenedLog, error) {
	nc, err := Connect(Credentials{URL: c.NATS, Token: token}, name)
	if err != nil {
		return nil, fmt.Errorf("log.nats: %w", err)
	}
	appends, err := NewClient(nc, ClientConfig{Timeout: c.Timeout()})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("log.nats: %w", err)
	}
	tenant := c.Tenant
	if tenant == "" {
		tenant = client.DefaultTenant
	}
	l := &OpenedLog{Log: &Log{Client: appends, Tenant: tenant, HashOnly: c.HashOnly}, Kind: LogKindNATS,
		Where: RedactURL(c.NATS) + " tenant " + tenant, NATS: nc, close: func() error { nc.Close(); return nil }}
	if !c.HashOnly {
		l.ByHash, l.Fits = &Log{Client: appends, Tenant: tenant, HashOnly: true}, natsAppendFits
	}
	return l, nil
}

// httpAppendFits reports whether the append body {"leaf": <leaf as a JSON string>}
// is within the log server's cap.
func httpAppendFits(leaf []byte) bool {
	q, err := json.Marshal(string(leaf))
	return err == nil && len(`{"leaf":}`)+len(q) <= MaxLeafBytes
}

// natsAppendFits reports whether a leaf is within the pipeline's cap.
func natsAppendFits(leaf []byte) bool { return len(leaf) <= MaxLeafBytes }
