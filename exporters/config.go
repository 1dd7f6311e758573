package exporters

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"svc.dev/svc/pipeline"
)

// Config holds the exporters' fields of a gateway or SDK config (SPEC.md, "Gateway
// config"), one per kind (kinds.go); both configs embed it. Any may be set; none
// means no export.
type Config struct {
	OTel   *OTelConfig   `json:"otel,omitempty"`
	Splunk *SplunkConfig `json:"splunk,omitempty"`
}

// OTelConfig is `otel`: { url, headersEnv?, serviceName? }.
type OTelConfig struct {
	// URL is the collector's OTLP/HTTP base address (e.g. http://127.0.0.1:4318);
	// spans are POSTed to <url>/v1/traces.
	URL string `json:"url"`
	// HeadersEnv maps an HTTP header name to the environment variable holding its
	// value, read once at startup: {"Authorization": "OTEL_AUTH"}. A variable that is
	// not set fails startup.
	HeadersEnv map[string]string `json:"headersEnv,omitempty"`
	// ServiceName is the resource attribute service.name; default "svc".
	ServiceName string `json:"serviceName,omitempty"`
}

// SplunkConfig is `splunk`: { url, tokenEnv, index?, source?, sourcetype?, host? }.
type SplunkConfig struct {
	// URL is the HTTP Event Collector's base address; events are POSTed to
	// <url>/services/collector/event.
	URL string `json:"url"`
	// TokenEnv names the environment variable holding the collector token, sent as
	// "Authorization: Splunk <token>". Required.
	TokenEnv   string `json:"tokenEnv"`
	Index      string `json:"index,omitempty"`
	Source     string `json:"source,omitempty"`     // default "svc"
	Sourcetype string `json:"sourcetype,omitempty"` // default "svc:receipt"
	Host       string `json:"host,omitempty"`
}

// Defaults.
const (
	DefaultServiceName = "svc"
	DefaultSource      = "svc"
	DefaultSourcetype  = "svc:receipt"
)

// Empty reports whether no exporter is configured.
func (c Config) Empty() bool {
	for _, k := range kinds {
		if k.configured(c) {
			return false
		}
	}
	return true
}

// Validate checks the fields' form (not the environment); errors name the field.
func (c Config) Validate() error {
	for _, k := range kinds {
		if k.configured(c) {
			if err := k.validate(c); err != nil {
				return err
			}
		}
	}
	return nil
}

func (o *OTelConfig) validate() error {
	if err := checkURL("otel.url", o.URL); err != nil {
		return err
	}
	for _, h := range sortedKeys(o.HeadersEnv) {
		if !validHeaderName(h) {
			return fmt.Errorf("otel.headersEnv: %q is not an HTTP header name", h)
		}
		if !pipeline.ValidEnvName(o.HeadersEnv[h]) {
			return fmt.Errorf("otel.headersEnv.%s: %q is not an environment variable name", h, o.HeadersEnv[h])
		}
	}
	return nil
}

func (s *SplunkConfig) validate() error {
	if err := checkURL("splunk.url", s.URL); err != nil {
		return err
	}
	if s.TokenEnv == "" {
		return fmt.Errorf("splunk.tokenEnv is required: the environment variable holding the collector token")
	}
	if !pipeline.ValidEnvName(s.TokenEnv) {
		return fmt.Errorf("splunk.tokenEnv: %q is not an environment variable name", s.TokenEnv)
	}
	return nil
}

func checkURL(field, raw string) error {
	if raw == "" {
		return fmt.Errorf("%s is required", field)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q: want an http:// or https:// address", field, raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%s %q: want a base address without query or fragment", field, raw)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// join appends path to a base URL, with exactly one slash between.
func join(base, path string) string {
	return strings.TrimRight(base, "/") + path
}

// validHeaderName reports whether s is an RFC 9110 field name (a token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}
