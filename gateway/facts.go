package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway/upstream"
	"svc.dev/svc/receipt"
)

// lookupFacts makes the configured lookups for tool, before the policy. It returns
// the facts for the receipt, their values for the policy, and, when a non-optional
// lookup failed, why (the call is then denied).
func (g *Gateway) lookupFacts(ctx context.Context, tool string, args json.RawMessage, meta map[string]any) (map[string]receipt.Fact, map[string]json.RawMessage, string) {
	facts := map[string]receipt.Fact{}
	values := map[string]json.RawMessage{}
	var agentArgs map[string]any
	decoded := false
	for _, f := range g.cfg.Facts {
		if !slices.Contains(f.ForTools, tool) {
			continue
		}
		if !decoded { // only for a tool with facts to look up
			_ = json.Unmarshal(args, &agentArgs)
			decoded = true
		}
		fargs, missing := fillTemplate(f.Args, agentArgs)
		if missing != "" {
			if f.Optional {
				continue // absent, testable in the policy with has
			}
			return facts, values, fmt.Sprintf("fact %s: the call has no argument %q to fill its lookup", f.Name, missing)
		}
		up := g.routes.ownerOf(f.Tool)
		if up == nil {
			return facts, values, fmt.Sprintf("fact %s: no upstream offers tool %s", f.Name, f.Tool)
		}
		var res *mcp.CallToolResult
		out, err := up.Call(ctx, upstream.Call{Tool: f.Tool, Args: fargs, Meta: meta})
		if err == nil {
			res = out.Parsed
		}
		if err == nil && res.IsError {
			err = fmt.Errorf("%s answered with an error: %s", f.Tool, resultText(res))
		}
		if err != nil {
			if f.Optional {
				continue
			}
			return facts, values, fmt.Sprintf("fact %s: lookup failed: %v", f.Name, err)
		}
		v := factValue(res)
		d, err := receipt.DigestJSON(v)
		if err != nil {
			return facts, values, fmt.Sprintf("fact %s: result: %v", f.Name, err)
		}
		facts[f.Name] = receipt.Fact{Tool: f.Tool, Args: fargs, Value: v, ResultDigest: d, Provenance: receipt.Observed}
		values[f.Name] = v
	}
	return facts, values, ""
}

// fillTemplate copies the template, replacing every string "$args.<key>" by the
// agent's argument key. It reports the first key the call lacks.
func fillTemplate(tmpl json.RawMessage, args map[string]any) (json.RawMessage, string) {
	if len(tmpl) == 0 {
		return json.RawMessage(`{}`), ""
	}
	var t any
	if err := json.Unmarshal(tmpl, &t); err != nil {
		return json.RawMessage(`{}`), ""
	}
	missing := ""
	var walk func(any) any
	walk = func(x any) any {
		switch v := x.(type) {
		case string:
			if key, ok := strings.CutPrefix(v, "$args."); ok {
				a, present := args[key]
				if !present && missing == "" {
					missing = key
				}
				return a
			}
			return v
		case map[string]any:
			out := make(map[string]any, len(v))
			for k, c := range v {
				out[k] = walk(c)
			}
			return out
		case []any:
			out := make([]any, len(v))
			for i, c := range v {
				out[i] = walk(c)
			}
			return out
		}
		return x
	}
	filled := walk(t)
	b, _ := json.Marshal(filled)
	return b, missing
}

// factValue is what a lookup observed: the structured result when there is one, else
// the text content parsed as JSON when it is JSON, else the text.
func factValue(res *mcp.CallToolResult) json.RawMessage {
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return b
		}
	}
	text := resultText(res)
	if json.Valid([]byte(text)) {
		return json.RawMessage(text)
	}
	b, _ := json.Marshal(text)
	return b
}

func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}
