package upstream

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Config is one upstream of the gateway config (SPEC.md, "Gateway config"), one of SPEC's three upstream shapes: exactly one of Command, URL
// and Rest.
type Config struct {
	// Name names the upstream in receipts (tool.upstream). Required in Upstreams;
	// optional for a single Upstream.
	Name string `json:"name,omitempty"`

	// Command spawns an MCP server over stdio with Args. Env is added to the
	// gateway's environment for that process only and is never shown to the agent.
	// A relative Command is looked up on PATH, not against the config file.
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`

	// URL connects to an MCP server over Streamable HTTP (http:// or https://).
	// TokenEnv, optional, names the environment variable holding its bearer token,
	// read once at start; a variable that is unset fails the start.
	URL      string `json:"url,omitempty"`
	TokenEnv string `json:"tokenEnv,omitempty"`

	// TimeoutMs bounds one tools/call to an MCP upstream (Command or URL), in
	// milliseconds, from the moment it is forwarded until the upstream's answer;
	// past it the agent gets `Upstream error: no answer within … (receipt <id>)` and
	// the receipt says error. It bounds each passed-through request (and each page
	// of a list the gateway unions) likewise. Optional; default 120000
	// (DefaultCallTimeout).
	TimeoutMs int `json:"timeoutMs,omitempty"`

	// Rest describes a plain HTTP API as tools.
	Rest *RestConfig `json:"rest,omitempty"`
}

// RestConfig is SPEC's REST upstream description.
type RestConfig struct {
	// BaseURL is the API's root (http:// or https://); each tool's Path is appended.
	// Required.
	BaseURL string `json:"baseUrl"`
	// HeaderEnv maps a header name to an environment variable read once at start; a
	// variable that is unset fails the start. Optional.
	HeaderEnv map[string]string `json:"headerEnv,omitempty"`
	// Headers are sent with every request as written. Optional.
	Headers map[string]string `json:"headers,omitempty"`
	// TimeoutMs bounds one request, in milliseconds. Optional; default 30000.
	TimeoutMs int `json:"timeoutMs,omitempty"`
	// Tools are the endpoints offered as tools. Required, at least one.
	Tools []RestTool `json:"tools"`
}

// RestTool is one REST endpoint offered as a tool.
type RestTool struct {
	// Name is the tool's name, unique across all upstreams. Required.
	Name string `json:"name"`
	// Method is the HTTP method (GET, POST, PUT, PATCH, DELETE). Required.
	Method string `json:"method"`
	// Path is appended to BaseURL; {name} segments are filled from the call's
	// arguments (escaped). Required.
	Path string `json:"path"`
	// InputSchema is the JSON Schema shown to the agent. Optional; default an object
	// schema that takes any arguments.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// Description is shown to the agent. Optional.
	Description string `json:"description,omitempty"`
	// Body "none" sends no body. Optional; by default the arguments left after Path
	// and Query go to a JSON body, except on GET and DELETE, where they go to the
	// query string.
	Body string `json:"body,omitempty"`
	// Query names the arguments that go to the query string. Optional.
	Query []string `json:"query,omitempty"`
}

// Check checks one upstream of the config, named field there (upstream,
// upstreams[i]): exactly one shape, and a REST description that can be served.
func (u *Config) Check(field string) error {
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

// Env reads the environment variable a config field names (log.tokenEnv, an
// upstream's tokenEnv or rest.headerEnv). Unset or empty is an error naming the
// variable and the usual cause: an MCP client starts the gateway with only a few of
// its own variables, so the client's entry for the gateway must pass it in "env".
func Env(field, name string) (string, error) {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v, nil
	}
	return "", fmt.Errorf("%s: environment variable %s is not set in the gateway's environment. "+
		"An MCP client starts the gateway with only a few of its own variables (the TypeScript SDK: HOME, LOGNAME, PATH, SHELL, TERM, USER), "+
		`so set it in the client's entry for the gateway: "env": {"%s": "<value>"}`, field, name, name)
}
