package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway/upstream"
)

// Pass-through with more than one upstream offering a feature (passthrough.go):
//   - a list (resources/list, resources/templates/list, prompts/list) is the union of
//     every such upstream's list, in the config's order, each item as its upstream
//     sent it. The gateway follows each upstream's nextCursor itself (at most
//     maxPassPages pages each) and answers the whole union in one page with no
//     nextCursor; a request carrying a cursor is refused (-32602), since the gateway
//     never gave one.
//   - any other request goes to the one upstream whose latest list names what it
//     names: resources/read and resources/(un)subscribe by uri (listed as a resource,
//     else matching a listed resource template), prompts/get by name, completion/complete
//     by its ref (a prompt's name, a resource template's uri). The latest lists are
//     the gateway's index (passIndex), filled by every union it answers and listed
//     again when a request names what the index does not hold.
//   - a uri or name that more than one upstream lists is passed to neither (-32602,
//     naming them), as a tool two upstreams offer is routed to neither; one no
//     upstream lists is refused likewise.

// maxPassPages bounds the pages of one upstream's list the gateway follows.
const maxPassPages = 100

// passIndex is which upstreams' latest lists name each passed-through resource (by
// uri), resource template and prompt (by name).
type passIndex struct {
	mu        sync.Mutex
	owners    map[string][]string // kind + "\x00" + uri or name → the upstreams listing it
	templates []passTemplate
}

// passTemplate is one resource template an upstream listed.
type passTemplate struct {
	upstream, template string
	re                 *regexp.Regexp // the URIs it expands to (every expression matching anything)
}

// Index kinds, and the list method and member each is read from.
const (
	kindResource = "resource"
	kindTemplate = "template"
	kindPrompt   = "prompt"
)

var kindLists = map[string]struct{ method, member, key string }{
	kindResource: {"resources/list", "resources", "uri"},
	kindTemplate: {"resources/templates/list", "resourceTemplates", "uriTemplate"},
	kindPrompt:   {"prompts/list", "prompts", "name"},
}

// listed is one upstream's whole list: each item as sent.
type listed struct {
	upstream string
	items    []json.RawMessage
}

// unionLine answers a list request with the union of ups' lists (member names the
// items), and records them in the index.
func (g *Gateway) unionLine(ctx context.Context, ups []passUpstream, env *rpcEnvelope, member string, hop upstream.Hop) []byte {
	var p struct {
		Cursor *string `json:"cursor"`
	}
	if json.Unmarshal(env.Params, &p) == nil && p.Cursor != nil {
		return rpcErrorLine(env.ID, mcp.INVALID_PARAMS, fmt.Sprintf("%s: the gateway answers the union of %d upstreams' lists in one page and gave no cursor; ask without one", env.Method, len(ups)), nil)
	}
	lists, err := listEach(ctx, ups, env.Method, member, hop)
	if err != nil {
		return rpcErrorLine(env.ID, mcp.INTERNAL_ERROR, err.Error(), nil)
	}
	for kind, l := range kindLists {
		if l.method == env.Method {
			g.passed.record(kind, lists)
		}
	}
	all := []json.RawMessage{}
	for _, l := range lists {
		all = append(all, l.items...)
	}
	res, err := json.Marshal(map[string]any{member: all})
	if err != nil {
		return rpcErrorLine(env.ID, mcp.INTERNAL_ERROR, err.Error(), nil)
	}
	return resultRawLine(env.ID, res, env.Method)
}

// listEach is each upstream's whole list of method (member holding the items).
func listEach(ctx context.Context, ups []passUpstream, method, member string, hop upstream.Hop) ([]listed, error) {
	out := make([]listed, 0, len(ups))
	for _, up := range ups {
		l := listed{upstream: up.name}
		cursor := ""
		for page := 0; ; page++ {
			if page == maxPassPages {
				return nil, fmt.Errorf("%s: upstream %s: more than %d pages", method, up.name, maxPassPages)
			}
			params := json.RawMessage(`{}`)
			if cursor != "" {
				params, _ = json.Marshal(map[string]string{"cursor": cursor})
			}
			res, rerr, err := up.f.Forward(ctx, method, params, hop)
			if err == nil && rerr != nil {
				err = fmt.Errorf("error %s", rerr)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: upstream %s: %w", method, up.name, err)
			}
			items, next, err := listPage(res, member)
			if err != nil {
				return nil, fmt.Errorf("%s: upstream %s: %w", method, up.name, err)
			}
			l.items = append(l.items, items...)
			if cursor = next; cursor == "" {
				break
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// listPage is the items (in member) and the nextCursor of one page of a list.
func listPage(res json.RawMessage, member string) ([]json.RawMessage, string, error) {
	var page map[string]json.RawMessage
	if err := json.Unmarshal(res, &page); err != nil {
		return nil, "", fmt.Errorf("the result is not a JSON object: %w", err)
	}
	var items []json.RawMessage
	if raw, ok := page[member]; ok {
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, "", fmt.Errorf("%s is not an array: %w", member, err)
		}
	}
	var next string
	if raw, ok := page["nextCursor"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &next); err != nil {
			return nil, "", fmt.Errorf("nextCursor is not a string: %w", err)
		}
	}
	return items, next, nil
}

// record replaces the index's entries of kind with lists.
func (x *passIndex) record(kind string, lists []listed) {
	key := kindLists[kind].key
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.owners == nil {
		x.owners = map[string][]string{}
	}
	for k := range x.owners {
		if strings.HasPrefix(k, kind+"\x00") {
			delete(x.owners, k)
		}
	}
	if kind == kindTemplate {
		x.templates = nil
	}
	for _, l := range lists {
		for _, item := range l.items {
			var it map[string]json.RawMessage
			var name string
			if json.Unmarshal(item, &it) != nil || json.Unmarshal(it[key], &name) != nil || name == "" {
				continue
			}
			k := kind + "\x00" + name
			if !slices.Contains(x.owners[k], l.upstream) {
				x.owners[k] = append(x.owners[k], l.upstream)
			}
			if kind == kindTemplate {
				x.templates = append(x.templates, passTemplate{upstream: l.upstream, template: name, re: templateRegexp(name)})
			}
		}
	}
}

// lookup is the upstreams whose latest lists name uri or name: for a resource, those
// listing it, else those with a template it is (completion names a template) or
// matches.
func (x *passIndex) lookup(kind, name string) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if kind == kindPrompt {
		return slices.Clone(x.owners[kindPrompt+"\x00"+name])
	}
	if owners := x.owners[kindResource+"\x00"+name]; len(owners) > 0 {
		return slices.Clone(owners)
	}
	if owners := x.owners[kindTemplate+"\x00"+name]; len(owners) > 0 {
		return slices.Clone(owners)
	}
	var owners []string
	for _, t := range x.templates {
		if t.re.MatchString(name) && !slices.Contains(owners, t.upstream) {
			owners = append(owners, t.upstream)
		}
	}
	return owners
}

// templateRegexp is a URI template (RFC 6570) as a pattern of the URIs it expands
// to, each expression matching any text: enough to tell which upstream's template a
// URI belongs to.
func templateRegexp(template string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for rest := template; rest != ""; {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			b.WriteString(regexp.QuoteMeta(rest))
			break
		}
		b.WriteString(regexp.QuoteMeta(rest[:open]))
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			b.WriteString(regexp.QuoteMeta(rest[open:]))
			break
		}
		b.WriteString(".*")
		rest = rest[open+end+1:]
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// passOwner is the upstream a request that names a resource or prompt goes to (nil:
// none, with the JSON-RPC error's code and why): the one whose latest list names
// it, the lists read again when the index names none.
func (g *Gateway) passOwner(ctx context.Context, feature string, env *rpcEnvelope, hop upstream.Hop) (*passUpstream, int, string) {
	kind, name, ok := passTarget(env.Method, env.Params)
	if !ok {
		return nil, mcp.INVALID_PARAMS, "the params name no resource uri or prompt name, which the gateway routes by among its upstreams"
	}
	listFeature := "resources"
	if kind == kindPrompt {
		listFeature = "prompts"
	}
	owners := g.passed.lookup(kind, name)
	if len(owners) == 0 {
		ups := g.offering(listFeature)
		kinds := []string{kindPrompt}
		if kind == kindResource {
			kinds = []string{kindResource, kindTemplate}
		}
		for _, k := range kinds {
			l := kindLists[k]
			lists, err := listEach(ctx, ups, l.method, l.member, hop)
			if err != nil {
				return nil, mcp.INTERNAL_ERROR, fmt.Sprintf("finding which upstream lists %s %q: %v", kind, name, err)
			}
			g.passed.record(k, lists)
		}
		owners = g.passed.lookup(kind, name)
	}
	switch {
	case len(owners) == 0:
		return nil, mcp.INVALID_PARAMS, fmt.Sprintf("no upstream lists %s %q", kind, name)
	case len(owners) > 1:
		return nil, mcp.INVALID_PARAMS, fmt.Sprintf("%s %q is listed by more than one upstream (%s); the gateway passes it to neither", kind, name, strings.Join(owners, ", "))
	}
	for _, up := range g.offering(feature) {
		if up.name == owners[0] {
			return &up, 0, ""
		}
	}
	return nil, mcp.METHOD_NOT_FOUND, fmt.Sprintf("upstream %s, which lists %s %q, does not offer %s", owners[0], kind, name, feature)
}

// passTarget is what a request names (a resource uri or a prompt name; kind
// kindResource or kindPrompt): resources/read and resources/(un)subscribe its uri,
// prompts/get its name, completion/complete its ref.
func passTarget(method string, params json.RawMessage) (kind, name string, ok bool) {
	var p struct {
		URI  string `json:"uri"`
		Name string `json:"name"`
		Ref  struct {
			Type string `json:"type"`
			URI  string `json:"uri"`
			Name string `json:"name"`
		} `json:"ref"`
	}
	if json.Unmarshal(params, &p) != nil {
		return "", "", false
	}
	switch {
	case method == "prompts/get":
		kind, name = kindPrompt, p.Name
	case method == "completion/complete" && p.Ref.Type == "ref/prompt":
		kind, name = kindPrompt, p.Ref.Name
	case method == "completion/complete" && p.Ref.Type == "ref/resource":
		kind, name = kindResource, p.Ref.URI
	case strings.HasPrefix(method, "resources/"):
		kind, name = kindResource, p.URI
	}
	return kind, name, name != ""
}
