// Package gateway is the MCP gateway: it stands between an agent and its tool
// providers (upstreams), decides every tools/call under the agent's grant and a Cedar
// policy, forwards the allowed ones, and issues a signed receipt of each call into a
// Merkle log before the agent sees the result (SPEC.md, "Gateway MCP behaviour").
//
// # The call path
//
// An agent speaks MCP over stdio (Gateway.ServeStdio) or Streamable HTTP
// (Gateway.Handler, Gateway.ServeHTTP). Each front opens a Session under a verified
// grant and hands every tools/call to one call path, Gateway.Call (call.go):
//
//	front (stdio.go, http.go)
//	  -> Gateway.Call / runCall    refuse what no receipt can record (grant window, JSON)
//	  -> decide                    arguments, scope, facts (facts.go), policy (policy.go)
//	  -> precommit                 receipt fits the log; a pre-committed tool's authorization logged
//	  -> upstream.Upstream.Call    forward (package upstream); its Result: parsed and raw
//	  -> finish                    the receipt logged (receipt.Issuer over the log), exported
//	  -> the front answers         mcp-go's encoding of the result, or the raw result (fast path)
//
// # Files
//
// Core: gateway.go (Gateway, the policy types, the limits of an agent's message,
// NewSession: a grant verified), session.go (Session, one agent connection), call.go
// (the call path; agentServer, the mcp-go server both fronts serve with, and the
// handlers it calls into the call path), facts.go (fact lookups before the policy),
// policy.go (the Cedar Decider), config.go (the config file), new.go (New: keys,
// policy, log, upstreams, exporters), pollable_*.go (the agent's stdin through the
// runtime's poller).
//
// Fronts: stdio.go (the stdio front: mcp-go's stdio server for every line the fast
// path leaves, RefuseStdio), http.go (the Streamable HTTP front: Origin, grant, proof
// and body checks before mcp-go's handler; the session's standalone stream),
// httpsessions.go (the HTTP sessions, which are the gateway's so that the fast path
// and mcp-go share them), httpasks.go (the HTTP front's own requests to the agent on
// that stream), proof.go (proof of possession, X-Svc-Proof).
//
// Faithful to MCP (docs/design/gateway.md, "Faithful to MCP"): relay.go (what an
// upstream sends within a call, relayed to the agent; the notes the gateway sends
// sessions outside a call, a stdio upstream's log messages among them), toolslist.go (tools/list
// answered with the upstreams' tools as sent), passthrough.go (resources, prompts and
// completion passed through when configured, to every upstream offering them),
// passindex.go (which upstream lists each passed-through resource and prompt).
//
// Fast paths: jsonrpc.go (a plain tools/call request decoded once, scanned when it has
// the usual shape; the answer with the receipt's id set in the upstream's raw result),
// fastcalls.go (what both fast paths share: calls in flight, cancellation, the answer
// line), stdiofast.go (the stdio front's reader and its call workers), httpfast.go
// (the HTTP front's fast path).
//
// Upstreams: package upstream (gateway/upstream): an MCP server over stdio or
// Streamable HTTP, or a REST API, behind one interface; a stdio upstream's tools/call
// takes a fast path of its own (child.go there).
//
// Tool definitions: tooldefs.go (each upstream's tools logged as a tool-definitions
// statement at start and on list_changed, the citation every receipt carries, the
// toolPins modes); upstream.WatchTools and upstream.Relist relist an upstream.
// routes.go: the upstreams and which one each tool goes to (one owner; a name two
// upstreams offer is routed to neither), rebuilt after a relisting, the agents whose
// grant names a changed tool told with notifications/tools/list_changed. Both are
// types of their own (toolDefs, router) that the Gateway holds, below gateway.go.
//
// Log: oversize.go (capLog, a remote log whose appends are capped); the log itself
// (a file, HTTP or NATS) is opened by pipeline.OpenLog, the SDK's opener too, from
// the config's logFile or log (pipeline.LogConfig).
//
// Below both ends, package wire (gateway/internal/wire) writes whole lines and scans
// JSON objects of the usual shape. Imports run one way: fronts -> fast paths -> core ->
// tool definitions -> routes -> upstream -> wire; the core knows no front and no fast
// path, and the tool definitions and routes know no Gateway.
//
// # References and their fast twins
//
// Each fast path answers as its reference would, and a fuzz target holds the two
// together; the reference is what runs whenever the fast twin declines.
//
//   - Agent side, stdio and HTTP: the reference is mcp-go's server (its stdio server,
//     its Streamable HTTP handler, Handler without the fast path); the fast twins are
//     stdiofast.go and httpfast.go. FuzzHTTPFastPath compares whole HTTP answers with
//     and without the fast path; FuzzDecodeToolCall holds decodeToolCall (and its scan,
//     scanToolCall) to mcp-go's decoding of the request; FuzzWithReceiptMeta holds the
//     raw answer (withReceiptMeta) to the result it carries; TestResultLineMatchesMCPGo
//     the answer built from a parsed result to mcp-go's line.
//   - Upstream side (package upstream): the reference is mcp-go's client; the fast twin
//     is a stdio upstream's tools/call path (childProcess.call, toolCallLine,
//     scanAnswer) and the one-pass parses of its result. FuzzToolCallLine holds the
//     request to mcp-go's, FuzzScanAnswer the scanned answer line to encoding/json,
//     FuzzParseCallToolResult the one-pass parse to mcp.ParseCallToolResult, and
//     FuzzParseHead the head-only parse (and its scan) to the full one.
//
// The receipts themselves have their own reference encodings and fast twins, listed
// in package receipt's documentation.
package gateway
