package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// maxRestResponse caps a REST upstream's answer.
const maxRestResponse = 4 << 20

// restUpstream offers a plain HTTP API as tools (SPEC.md, "REST upstream description").
type restUpstream struct {
	name    string
	cfg     *RestConfig
	headers http.Header // Headers plus HeaderEnv, read once at startup
	client  *http.Client
	tools   []mcp.Tool
	byName  map[string]*RestTool
}

var pathParam = regexp.MustCompile(`\{([A-Za-z0-9_]+)\}`)

func newRestUpstream(name string, cfg *RestConfig) (*restUpstream, error) {
	u := &restUpstream{name: name, cfg: cfg, headers: http.Header{}, byName: map[string]*RestTool{}}
	for k, v := range cfg.Headers {
		u.headers.Set(k, v)
	}
	for h, env := range cfg.HeaderEnv {
		v, err := Env(fmt.Sprintf("upstream %s: rest.headerEnv for header %s", name, h), env)
		if err != nil {
			return nil, err
		}
		u.headers.Set(h, v)
	}
	timeout := 30 * time.Second
	if cfg.TimeoutMs > 0 {
		timeout = time.Duration(cfg.TimeoutMs) * time.Millisecond
	}
	u.client = &http.Client{Timeout: timeout}
	for i := range cfg.Tools {
		t := &cfg.Tools[i]
		u.byName[t.Name] = t
		schema := t.InputSchema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		u.tools = append(u.tools, mcp.NewToolWithRawSchema(t.Name, t.Description, schema))
	}
	return u, nil
}

func (u *restUpstream) Name() string      { return u.name }
func (u *restUpstream) Tools() []mcp.Tool { return u.tools }
func (u *restUpstream) Close() error      { return nil }

// Call maps the arguments onto the request: {name} path segments first, then the
// names in `query` to the query string, the rest to the query string on GET and DELETE
// and to a JSON body otherwise (none with body: "none"). The response body is the tool
// result, JSON kept as JSON; a non-2xx status is a failed execution carrying it.
// The result has no Raw: it is made here.
func (u *restUpstream) Call(ctx context.Context, c Call) (*Result, error) {
	t, ok := u.byName[c.Tool]
	if !ok {
		return nil, fmt.Errorf("upstream %s has no tool %s", u.name, c.Tool)
	}
	req, path, err := u.request(ctx, t, c.Args)
	if err != nil {
		return nil, err
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxRestResponse))
	if err != nil {
		return nil, err
	}
	return &Result{Parsed: restResult(req.Method, path, resp, data)}, nil
}

// request maps a tool call onto the HTTP request its description names: path
// parameters from the arguments of the same name, the rest into the query (GET,
// DELETE, or listed in query) or a JSON body. It returns the request and its path.
func (u *restUpstream) request(ctx context.Context, t *RestTool, raw json.RawMessage) (*http.Request, string, error) {
	args := map[string]any{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, "", fmt.Errorf("arguments are not an object: %w", err)
		}
	}
	var missing []string
	path := pathParam.ReplaceAllStringFunc(t.Path, func(seg string) string {
		k := seg[1 : len(seg)-1]
		v, ok := args[k]
		if !ok {
			missing = append(missing, k)
			return seg
		}
		delete(args, k)
		return url.PathEscape(scalar(v))
	})
	if len(missing) > 0 {
		return nil, "", fmt.Errorf("missing path arguments %v", missing)
	}
	method := strings.ToUpper(t.Method)
	q := url.Values{}
	var body io.Reader
	toQuery := method == http.MethodGet || method == http.MethodDelete
	rest := map[string]any{}
	for k, v := range args {
		if toQuery || slices.Contains(t.Query, k) {
			q.Set(k, scalar(v))
		} else {
			rest[k] = v
		}
	}
	if !toQuery && t.Body != "none" {
		b, err := json.Marshal(rest)
		if err != nil {
			return nil, "", err
		}
		body = bytes.NewReader(b)
	}
	target := strings.TrimRight(u.cfg.BaseURL, "/") + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, "", err
	}
	req.Header = u.headers.Clone()
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, path, nil
}

// restResult is the tool result of an HTTP answer: its text (with the status when it
// is not 2xx, then a tool error), and JSON kept as structured content.
func restResult(method, path string, resp *http.Response, data []byte) *mcp.CallToolResult {
	res := &mcp.CallToolResult{IsError: resp.StatusCode < 200 || resp.StatusCode > 299}
	text := string(data)
	if res.IsError {
		text = fmt.Sprintf("%s %s answered %s: %s", method, path, resp.Status, data)
	}
	res.Content = []mcp.Content{mcp.NewTextContent(text)}
	if json.Valid(data) && len(bytes.TrimSpace(data)) > 0 {
		var v any
		_ = json.Unmarshal(data, &v)
		if _, isObj := v.(map[string]any); isObj {
			res.StructuredContent = v // JSON kept as JSON
		} else {
			res.StructuredContent = map[string]any{"result": v}
		}
	}
	return res
}

func scalar(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case nil:
		return ""
	default:
		b, _ := json.Marshal(t)
		return string(b)
	}
}
