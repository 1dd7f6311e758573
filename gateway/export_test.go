package gateway

// ParseCallToolResult exposes parseCallToolResult to the external tests.
var ParseCallToolResult = parseCallToolResult
