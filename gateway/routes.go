package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

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

// router owns the upstreams and their routes: which one each tool goes to, and the
// fronts told when that changes.
type router struct {
	upstreams []upstream.Upstream // every upstream, in config order; set at start
	current   atomic.Pointer[routing]
	watchers  toolWatchers // the fronts told when the routed tools change
	log       *slog.Logger
}

// routing is one immutable snapshot of the routes.
type routing struct {
	owner map[string]upstream.Upstream // tool → the one upstream offering it
	dups  map[string][]string          // tool → the upstreams offering it, when more than one
}

// newRouting maps each tool of the upstreams' current tools to its upstream.
func (r *router) newRouting() *routing {
	next := &routing{owner: map[string]upstream.Upstream{}, dups: map[string][]string{}}
	offered := map[string][]string{}
	for _, u := range r.upstreams {
		for _, t := range u.Tools() {
			offered[t.Name] = append(offered[t.Name], u.Name())
			next.owner[t.Name] = u
		}
	}
	for name, ups := range offered {
		if len(ups) > 1 {
			delete(next.owner, name)
			next.dups[name] = ups
		}
	}
	return next
}

// ownerOf is the upstream a call of tool goes to; nil when none offers it, or more
// than one does.
func (r *router) ownerOf(tool string) upstream.Upstream {
	if cur := r.current.Load(); cur != nil {
		return cur.owner[tool]
	}
	return nil
}

// offeredBy names the upstreams offering tool when more than one does (nil otherwise).
func (r *router) offeredBy(tool string) []string {
	if cur := r.current.Load(); cur != nil {
		return cur.dups[tool]
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

// addServer registers every upstream's tools with a front's server (add registers
// one); a tool routed later is registered then (reroute).
func (r *router) addServer(srv *server.MCPServer, add func(mcp.Tool)) {
	w := &r.watchers
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.servers == nil {
		w.servers = map[*server.MCPServer]func(mcp.Tool){}
	}
	w.servers[srv] = add
	for _, u := range r.upstreams {
		for _, t := range u.Tools() {
			add(t)
		}
	}
}

// watchNotes has listen given every note for the agents' sessions (a tools change,
// an upstream's log message) until the returned func is called. listen must not
// block: it runs under the watchers' lock.
func (r *router) watchNotes(listen func(note)) (stop func()) {
	w := &r.watchers
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
func (r *router) tell(n note) {
	w := &r.watchers
	w.mu.Lock()
	defer w.mu.Unlock()
	r.tellLocked(n)
}

// tellLocked is tell with the watchers' lock held.
func (r *router) tellLocked(n note) {
	for l := range r.watchers.listeners {
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
func (r *router) reroute(u upstream.Upstream, before map[string]string) {
	w := &r.watchers
	w.mu.Lock()
	defer w.mu.Unlock()
	old, next := r.current.Load(), r.newRouting()
	r.current.Store(next)
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
			r.log.Error("tool not routed: more than one upstream offers it", "tool", name, "upstreams", ups,
				"next", "each tool must belong to exactly one upstream; its calls are refused and tools/list leaves it out until one of them drops it (or restart with one of them removed)")
		}
	}
	for _, t := range u.Tools() {
		if next.owner[t.Name] == u && old.owner[t.Name] == nil {
			for _, add := range w.servers {
				add(t)
			}
			r.log.Info("tool routed", "upstream", u.Name(), "tool", t.Name)
		}
	}
	names := slices.Sorted(maps.Keys(changed))
	if len(names) == 0 {
		return
	}
	r.tellLocked(note{line: listChangedLine, to: func(s *Session) bool { return grantNamesAny(s, names) }})
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
