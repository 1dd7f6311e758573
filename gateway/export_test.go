package gateway

import "net/http"

// FastCalls is the number of tool calls the fronts' fast paths answered.
func FastCalls(g *Gateway) int64 { return g.fastCalls.Load() }

// HandlerWithoutFastPath is Handler with every request served by mcp-go, as before
// the tools/call fast path: the reference the fast path's answers are compared with.
func HandlerWithoutFastPath(g *Gateway, cfg HTTPConfig) http.Handler {
	cfg.noFastPath = true
	return g.Handler(cfg)
}
