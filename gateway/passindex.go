package gateway

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
)

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
