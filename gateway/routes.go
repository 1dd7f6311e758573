package gateway

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"svc.dev/svc/gateway/upstream"
)

// Routing: each tool name belongs to the one upstream offering it (SPEC: checked at
// startup, where two upstreams offering one name is a configuration error). An
// upstream's tools change after start (notifications/tools/list_changed, relisted by
// tooldefs.go): the routes are rebuilt from every upstream's current tools, a tool
// that now appears is registered with the fronts' servers, and each agent whose grant
// names a tool that appeared, went or changed is told with
// notifications/tools/list_changed. A name two upstreams offer after such a change is
// not routed (its calls are refused, tools/list leaves it out) until one drops it.

// listChangedLine is notifications/tools/list_changed, one line.
var listChangedLine = []byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}` + "\n")

// routing is one immutable snapshot of the routes.
type routing struct {
	owner map[string]upstream.Upstream // tool → the one upstream offering it
	dups  map[string][]string          // tool → the upstreams offering it, when more than one
}

// newRouting maps each tool of the upstreams' current tools to its upstream.
func (g *Gateway) newRouting() *routing {
	r := &routing{owner: map[string]upstream.Upstream{}, dups: map[string][]string{}}
	offered := map[string][]string{}
	for _, u := range g.upstreams {
		for _, t := range u.Tools() {
			offered[t.Name] = append(offered[t.Name], u.Name())
			r.owner[t.Name] = u
		}
	}
	for name, ups := range offered {
		if len(ups) > 1 {
			delete(r.owner, name)
			r.dups[name] = ups
		}
	}
	return r
}

// ownerOf is the upstream a call of tool goes to; nil when none offers it, or more
// than one does.
func (g *Gateway) ownerOf(tool string) upstream.Upstream {
	if r := g.routes.Load(); r != nil {
		return r.owner[tool]
	}
	return nil
}

// offeredBy names the upstreams offering tool when more than one does (nil otherwise).
func (g *Gateway) offeredBy(tool string) []string {
	if r := g.routes.Load(); r != nil {
		return r.dups[tool]
	}
	return nil
}

// A note is a notification the gateway sends its agents outside any call, to each
// session for which to holds: notifications/tools/list_changed to the sessions whose
// grant names a tool that changed (routes.go), an upstream's log message to those
// whose grant names one of its tools and whose logging/setLevel lets its level
// through (relayLogs). A front sends it on the session's stream: stdout on stdio, the
// standalone event stream over HTTP (none open: missed).
type note struct {
	line []byte // the JSON-RPC notification, one line with its newline
	to   func(*Session) bool
}

// toolWatchers are the fronts' servers (each needs a handler for every routed tool)
// and the fronts' listeners (each told the notes for its sessions: relay.go).
type toolWatchers struct {
	mu        sync.Mutex
	servers   map[*server.MCPServer]func(mcp.Tool) // registers a tool with that server (call.go's addTool)
	listeners map[*func(note)]struct{}
}

// watchNotes has listen given every note for the agents' sessions (a tools change,
// an upstream's log message) until the returned func is called. listen must not
// block: it runs under the watchers' lock.
func (g *Gateway) watchNotes(listen func(note)) (stop func()) {
	w := &g.watchers
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.listeners == nil {
		w.listeners = map[*func(note)]struct{}{}
	}
	p := &listen
	w.listeners[p] = struct{}{}
	return func() {
		w.mu.Lock()
		delete(w.listeners, p)
		w.mu.Unlock()
	}
}

// tell gives n to every front's listener.
func (g *Gateway) tell(n note) {
	w := &g.watchers
	w.mu.Lock()
	defer w.mu.Unlock()
	g.tellLocked(n)
}

// tellLocked is tell with the watchers' lock held.
func (g *Gateway) tellLocked(n note) {
	for l := range g.watchers.listeners {
		(*l)(n)
	}
}

// grantNamesAny reports whether s's grant names any of tools.
func grantNamesAny(s *Session, tools []string) bool {
	return s != nil && slices.ContainsFunc(tools, s.chain.Leaf().HasScope)
}

// reroute rebuilds the routes after u's tools changed from before (each tool's
// definition as sent, by name), registers the tools that appeared with the fronts'
// servers and tells the fronts which tools changed.
func (g *Gateway) reroute(u upstream.Upstream, before map[string]string) {
	w := &g.watchers
	w.mu.Lock()
	defer w.mu.Unlock()
	old, next := g.routes.Load(), g.newRouting()
	g.routes.Store(next)
	after := toolsByName(u)
	changed := map[string]bool{}
	for name, def := range after {
		if before[name] != def {
			changed[name] = true
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			changed[name] = true
		}
	}
	for name, ups := range next.dups {
		if !slices.Equal(old.dups[name], ups) {
			g.log.Error("tool not routed: more than one upstream offers it", "tool", name, "upstreams", ups,
				"next", "each tool must belong to exactly one upstream; its calls are refused and tools/list leaves it out until one of them drops it (or restart with one of them removed)")
		}
	}
	for _, t := range u.Tools() {
		if next.owner[t.Name] == u && old.owner[t.Name] == nil {
			for _, add := range w.servers {
				add(t)
			}
			g.log.Info("tool routed", "upstream", u.Name(), "tool", t.Name)
		}
	}
	names := slices.Sorted(maps.Keys(changed))
	if len(names) == 0 {
		return
	}
	g.tellLocked(note{line: listChangedLine, to: func(s *Session) bool { return grantNamesAny(s, names) }})
}

// toolsByName is each of u's tools as sent, by name.
func toolsByName(u upstream.Upstream) map[string]string {
	raws := upstream.RawTools(u)
	out := make(map[string]string, len(raws))
	for i, t := range u.Tools() {
		if i < len(raws) {
			out[t.Name] = string(raws[i])
		} else {
			b, _ := json.Marshal(t)
			out[t.Name] = string(b)
		}
	}
	return out
}

// advertiseListChanged has an initialize answer say the gateway sends
// notifications/tools/list_changed. (mcp-go's own tools.listChanged would have it
// send one to every session whenever a tool is registered, grant or not.)
func advertiseListChanged(hooks *server.Hooks) {
	hooks.AddAfterInitialize(func(_ context.Context, _ any, _ *mcp.InitializeRequest, res *mcp.InitializeResult) {
		if res.Capabilities.Tools != nil {
			res.Capabilities.Tools.ListChanged = true
		}
	})
}
