package gateway

// ParseCallToolResult exposes parseCallToolResult to the external tests.
var ParseCallToolResult = parseCallToolResult

// FastCalls is the number of tool calls the fronts' fast paths answered.
func FastCalls(g *Gateway) int64 { return g.fastCalls.Load() }
