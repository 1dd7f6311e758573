package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/exporters"
	"svc.dev/svc/gateway/upstream"
	"svc.dev/svc/receipt"
)

// Tool-definition transparency (docs/design/gateway.md, "Tool definitions"). Every
// upstream's tools are logged as a tool-definitions statement when the gateway
// connects and whenever they change (notifications/tools/list_changed, then a
// tools/list that differs); each receipt's tool cites the definition it was called
// under (definitionDigest, definitionLeafIndex). With toolPins a changed definition is
// refused: the call is denied before the upstream, and tools/list shows the pinned one.
//
// The digests are computed once per logged listing (record), never per call: a call
// reads one immutable snapshot (defsView) through an atomic pointer.

// Tool pin modes (Config.ToolPins).
const (
	PinsOff       = "off"
	PinsFirstSeen = "first-seen"
	pinsFile      = "file" // any other value of toolPins: a file of digests
)

// toolDefs is what the gateway knows of its upstreams' tool definitions.
type toolDefs struct {
	issuer        *receipt.Issuer // logs each listing
	log           *slog.Logger
	now           func() time.Time
	onToolChanged func(upstream, tool string) // Options.OnToolChanged; nil: none
	events        exporters.EventSink         // the exporters' tool definition changes; nil: none

	mode   string
	view   atomic.Pointer[defsView]
	mu     sync.Mutex        // serializes record
	logged map[string]string // upstream → digest of the tool list last logged; under mu
	// unlogged are the upstreams whose current definitions the log refused (under
	// mu); pending is their number, which a call reads.
	unlogged map[string]upstream.Upstream
	pending  atomic.Int32
	refresh  sync.Mutex   // serializes relisting
	changes  atomic.Int64 // definitions changed since start (the metric's count)
}

// defsView is one immutable snapshot: each tool's current definition and its pin.
type defsView struct {
	cur  map[string]toolDef
	pins map[string]toolPin
}

// toolDef is a tool's current definition, as logged.
type toolDef struct {
	upstream string
	digest   string
	leaf     *uint64 // the statement's leaf index, shared by every receipt citing it
	raw      json.RawMessage
}

// toolPin is the definition a tool is held to: its digest, and the definition to
// show the agent (nil: not known, a pin from a file whose tool was never seen so).
type toolPin struct {
	digest string
	raw    json.RawMessage
}

// open reads the pins of the config's toolPins (pinsPath: it as a path): a file's,
// or under first-seen the first definitions the receipts directory logged under the
// gateway's key (keyID).
func (d *toolDefs) open(toolPins, pinsPath, receiptsDir, keyID string) error {
	d.logged, d.unlogged = map[string]string{}, map[string]upstream.Upstream{}
	v := &defsView{cur: map[string]toolDef{}, pins: map[string]toolPin{}}
	switch toolPins {
	case "", PinsOff:
		d.mode = PinsOff
	case PinsFirstSeen:
		d.mode = PinsFirstSeen
		if err := loadFirstSeen(v.pins, receiptsDir, keyID); err != nil {
			return err
		}
	default:
		d.mode = pinsFile
		pins, err := readPinsFile(pinsPath)
		if err != nil {
			return fmt.Errorf("toolPins: %w", err)
		}
		for name, digest := range pins {
			v.pins[name] = toolPin{digest: digest}
		}
	}
	d.view.Store(v)
	return nil
}

// readPinsFile reads {"tools": {"<tool>": "<sha256 hex>"}}.
func readPinsFile(path string) (map[string]string, error) {
	data, err := receipt.ReadFileCapped(path, 1<<20)
	if err != nil {
		return nil, err
	}
	var f struct {
		Tools map[string]string `json:"tools"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: want {\"tools\": {\"<tool>\": \"<sha256 of its canonical definition>\"}}: %w", path, err)
	}
	for name, d := range f.Tools {
		if !receipt.IsDigestHex(d) {
			return nil, fmt.Errorf("%s: tool %s: %q is not a SHA-256 digest (64 lowercase hex digits) of its canonical definition", path, name, d)
		}
	}
	return f.Tools, nil
}

// loadFirstSeen pins each tool to the first definition a tool-definitions statement
// in the receipts directory, signed by this gateway's key (keyID), gave it (lowest
// leaf index).
func loadFirstSeen(pins map[string]toolPin, receiptsDir, keyID string) error {
	files, err := filepath.Glob(filepath.Join(receiptsDir, "*.tools.json"))
	if err != nil {
		return err
	}
	type seen struct {
		leaf uint64
		def  receipt.ToolDefinition
	}
	first := map[string]seen{}
	for _, f := range files {
		data, err := receipt.ReadFileCapped(f, receipt.MaxBundleSize)
		if err != nil {
			return fmt.Errorf("toolPins first-seen: %w", err)
		}
		b, err := receipt.ParseBundle(data)
		if err != nil {
			return fmt.Errorf("toolPins first-seen: %s: %w", f, err)
		}
		if b.Envelope.Signatures[0].KeyID != keyID {
			continue // another key's (a rotated one): not this gateway's record
		}
		p, err := receipt.DecodeToolDefinitions(b.Envelope)
		if err != nil {
			return fmt.Errorf("toolPins first-seen: %s: %w", f, err)
		}
		for _, t := range p.Tools {
			if s, ok := first[t.Name]; !ok || b.Inclusion.LeafIndex < s.leaf {
				first[t.Name] = seen{b.Inclusion.LeafIndex, t}
			}
		}
	}
	for name, s := range first {
		pins[name] = toolPin{digest: s.def.DefinitionDigest, raw: s.def.Definition}
	}
	return nil
}

// record logs u's current tools as a tool-definitions statement unless the last one
// logged for u lists the same, and makes them the current definitions.
func (d *toolDefs) record(ctx context.Context, u upstream.Upstream) error {
	raws := upstream.RawTools(u)
	defs, err := receipt.NewToolDefinitions(raws)
	if err != nil {
		return fmt.Errorf("upstream %s: %w", u.Name(), err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	list := receipt.ToolListDigest(defs)
	if d.logged[u.Name()] == list {
		return nil
	}
	// Not logged (the log refused it): the definitions still hold and are pinned, but
	// no receipt cites them until a later attempt logs them (retry).
	var leafp *uint64
	b, logErr := d.issuer.LogToolDefinitions(ctx, u.Name(), defs)
	if logErr == nil {
		d.logged[u.Name()] = list
		leaf := b.Inclusion.LeafIndex
		leafp = &leaf
		delete(d.unlogged, u.Name())
	} else {
		d.unlogged[u.Name()] = u
	}
	d.pending.Store(int32(len(d.unlogged)))
	d.apply(u, defs, raws, leafp)
	if logErr != nil {
		return fmt.Errorf("upstream %s: logging its tool definitions: %w", u.Name(), logErr)
	}
	d.log.Info("tool definitions logged", "upstream", u.Name(), "tools", len(defs), "listDigest", list, "leafIndex", *leafp)
	return nil
}

// apply makes defs (u's tools as sent: raws) the current definitions, pins them
// under first-seen, and reports each change. Under d.mu.
func (d *toolDefs) apply(u upstream.Upstream, defs []receipt.ToolDefinition, raws []json.RawMessage, leaf *uint64) {
	old := d.view.Load()
	next := &defsView{cur: maps.Clone(old.cur), pins: maps.Clone(old.pins)}
	for name, t := range next.cur {
		if t.upstream == u.Name() {
			delete(next.cur, name)
		}
	}
	for i, t := range defs {
		next.cur[t.Name] = toolDef{upstream: u.Name(), digest: t.DefinitionDigest, leaf: leaf, raw: raws[i]}
		prev, had := old.cur[t.Name]
		pin, pinned := next.pins[t.Name]
		switch {
		case d.mode == PinsFirstSeen && !pinned:
			next.pins[t.Name] = toolPin{digest: t.DefinitionDigest, raw: raws[i]}
		case pinned && pin.digest == t.DefinitionDigest:
			next.pins[t.Name] = toolPin{digest: pin.digest, raw: raws[i]} // as the upstream sends it
		}
		if had && prev.digest != t.DefinitionDigest {
			d.changed(u.Name(), t.Name, prev.digest, t.DefinitionDigest, leaf)
		} else if !had && pinned && pin.digest != t.DefinitionDigest {
			d.changed(u.Name(), t.Name, pin.digest, t.DefinitionDigest, leaf)
		}
	}
	d.view.Store(next)
}

// retry logs the definitions the log refused before (at start, or after a change); a
// call takes this only while some are unlogged.
func (d *toolDefs) retry(ctx context.Context) {
	d.mu.Lock()
	ups := make([]upstream.Upstream, 0, len(d.unlogged))
	for _, u := range d.unlogged {
		ups = append(ups, u)
	}
	d.mu.Unlock()
	for _, u := range ups {
		if err := d.record(ctx, u); err != nil {
			d.log.Warn("tool definitions still not logged", "upstream", u.Name(), "err", err)
		}
	}
}

// changed reports a definition that differs from the one before it (or, at start,
// from its pin): a structured log line, the count, Options.OnToolChanged (the metric)
// and an event to the configured exporters. leaf is the statement logging to; nil
// while the log has not taken it.
func (d *toolDefs) changed(up, tool, from, to string, leaf *uint64) {
	d.changes.Add(1)
	if d.onToolChanged != nil {
		d.onToolChanged(up, tool)
	}
	refused := d.mode != PinsOff
	if d.events != nil {
		d.events.ExportToolChange(context.Background(), exporters.ToolChange{Upstream: up, Tool: tool, From: from, To: to,
			Leaf: leaf, Pins: d.mode, Refused: refused, At: d.now()})
	}
	attrs := []any{"upstream", up, "tool", tool, "from", from, "to", to, "toolPins", d.mode, "refused", refused}
	if leaf != nil {
		attrs = append(attrs, "leafIndex", *leaf)
	}
	d.log.Warn("tool definition changed", attrs...)
}

// watch relists u's tools whenever it says they changed, logs them when they differ,
// and reroutes (routes.go: a tool added is routed, the agents told).
func (d *toolDefs) watch(u upstream.Upstream, r *router) {
	upstream.WatchTools(u, func() {
		d.refresh.Lock()
		defer d.refresh.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		before := toolsByName(u)
		changed, err := upstream.Relist(ctx, u)
		if err == nil && changed {
			err = d.record(ctx, u)
			r.reroute(u, before) // routed whether or not the log took the definitions yet
		}
		if err != nil {
			d.log.Warn("tool definitions not refreshed", "upstream", u.Name(), "err", err)
		}
	})
}

// cite sets the receipt's tool.definitionDigest and definitionLeafIndex to the tool's
// current definition, once logged (runCall retries one the log refused).
func (d *toolDefs) cite(t *receipt.Tool) {
	if def, ok := d.view.Load().cur[t.Name]; ok && def.leaf != nil {
		t.DefinitionDigest, t.DefinitionLeafIndex = def.digest, def.leaf
	}
}

// pinRefusal is why a call to tool must be refused under toolPins ("" when it may go
// on): its current definition differs from its pin, or a pins file does not name it.
func (d *toolDefs) pinRefusal(tool string) string {
	if d.mode == PinsOff {
		return ""
	}
	v := d.view.Load()
	cur, pin := v.cur[tool].digest, v.pins[tool]
	switch {
	case pin.digest == "":
		return fmt.Sprintf("tool %s has no pinned definition in toolPins (its definition is %s); nothing was forwarded", tool, cur)
	case cur != pin.digest:
		return fmt.Sprintf("tool %s's definition changed: pinned %s, now %s; nothing was forwarded. Review the change (svc tools diff) before pinning the new definition", tool, pin.digest, cur)
	}
	return ""
}

// offeredTool is the definition tools/list shows for a tool as the upstream sent it
// (raw): raw itself, or under toolPins its pinned definition (nil: not offered, a tool
// with no pin or whose pinned definition the gateway never saw).
func (d *toolDefs) offeredTool(name string, raw json.RawMessage) json.RawMessage {
	if d.mode == PinsOff {
		return raw
	}
	v := d.view.Load()
	pin, ok := v.pins[name]
	if !ok {
		return nil
	}
	if cur, ok := v.cur[name]; ok && cur.digest == pin.digest {
		return raw
	}
	return pin.raw
}

// offeredTools is offeredTool over parsed tools (mcp-go's answers).
func (d *toolDefs) offeredTools(tools []mcp.Tool) []mcp.Tool {
	if d.mode == PinsOff {
		return tools
	}
	v := d.view.Load()
	out := make([]mcp.Tool, 0, len(tools))
	for _, t := range tools {
		pin, ok := v.pins[t.Name]
		var p mcp.Tool
		switch {
		case !ok:
		case v.cur[t.Name].digest == pin.digest:
			out = append(out, t)
		case pin.raw != nil && json.Unmarshal(pin.raw, &p) == nil:
			out = append(out, p)
		}
	}
	return out
}
