package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"svc.dev/svc/gateway/upstream"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// A toolCall is one tools/call on its way through the gateway: what the receipt records
// and what the steps after the decision need.
type toolCall struct {
	s         *Session
	tool      string
	args      json.RawMessage
	agentMeta map[string]any
	up        upstream.Upstream          // nil when no upstream offers the tool
	record    receipt.Call               // what the receipt records, filled in step by step
	meta      map[string]any             // the svc/ meta keys the upstream receives
	facts     map[string]json.RawMessage // fact values observed for the policy
}

// Call runs one tool call through the gateway and returns what the agent gets.
// Refusals are tool errors, never protocol errors. The steps are SPEC.md's
// "Gateway MCP behaviour": recordable arguments, scope, facts, policy, pre-commit,
// forward, receipt, result.
func (g *Gateway) Call(ctx context.Context, s *Session, tool string, args json.RawMessage, agentMeta map[string]any) *mcp.CallToolResult {
	res, _ := g.runCall(ctx, s, tool, args, agentMeta, false)
	return res
}

// callRelaying is Call from mcp-go's tool handler: what the upstream sends within the
// call is relayed to the agent of ctx, and the agent's retry of an input_required
// result forwarded (relay.go).
func (g *Gateway) callRelaying(ctx context.Context, s *Session, req mcp.CallToolRequest, tool string) *mcp.CallToolResult {
	res, _ := g.runCallWith(ctx, s, tool, requestArgs(req), requestMeta(req), false, relayCall(ctx, req))
	return res
}

// agentServer builds an agent-facing MCP server, the reference both fronts serve
// with: tools/list answers session's current granted tools (ToolsFor), tools
// list_changed is advertised (routes.go), logging/setLevel is taken and recorded on
// the session (relayLogs reads it), as are the capabilities of initialize (Session.hop), the configured pass-through is offered
// (passthrough.go), and every routed tool has a handler running the call path.
func (g *Gateway) agentServer(hooks *server.Hooks, session func(context.Context) *Session) *server.MCPServer {
	hooks.AddAfterListTools(func(ctx context.Context, _ any, _ *mcp.ListToolsRequest, res *mcp.ListToolsResult) {
		res.Tools = g.ToolsFor(session(ctx)) // the upstreams' current tools (tooldefs.go: relisted, pinned)
	})
	hooks.AddAfterSetLevel(func(ctx context.Context, _ any, req *mcp.SetLevelRequest, _ *mcp.EmptyResult) {
		if s := session(ctx); s != nil {
			level := req.Params.Level
			s.logLevel.Store(&level)
		}
	})
	hooks.AddAfterInitialize(func(ctx context.Context, _ any, req *mcp.InitializeRequest, _ *mcp.InitializeResult) {
		if s := session(ctx); s != nil {
			if caps, err := json.Marshal(req.Params.Capabilities); err == nil {
				s.caps.Store((*json.RawMessage)(&caps))
			}
		}
	})
	advertiseListChanged(hooks)
	srv := server.NewMCPServer("svc-gateway", receipt.Version, append(g.passThroughOptions(),
		server.WithToolCapabilities(false), server.WithLogging(), server.WithHooks(hooks))...)
	g.addTools(srv, session)
	return srv
}

// addTools registers every routed tool with a handler that runs the call path for
// the session of the request; a tool routed later is registered then (reroute).
func (g *Gateway) addTools(srv *server.MCPServer, session func(context.Context) *Session) {
	g.routes.addServer(srv, func(t mcp.Tool) { g.addTool(srv, t, session) })
}

// addTool registers t with srv.
func (g *Gateway) addTool(srv *server.MCPServer, t mcp.Tool, session func(context.Context) *Session) {
	name := t.Name
	srv.AddTool(t, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s := session(ctx)
		if s == nil {
			return errorResult("Denied by policy: no grant was presented for this request"), nil
		}
		return g.callRelaying(ctx, s, req, name), nil
	})
}

func requestArgs(req mcp.CallToolRequest) json.RawMessage {
	if len(req.Params.RawArguments) > 0 {
		return req.Params.RawArguments
	}
	if req.Params.Arguments == nil {
		return nil
	}
	b, _ := json.Marshal(req.Params.Arguments)
	return b
}

// requestMeta is the request's _meta as the agent sent it, its progressToken included
// (mcp-go holds that apart): forwarded, it has the upstream's progress notifications
// name the agent's token.
func requestMeta(req mcp.CallToolRequest) map[string]any {
	if req.Params.Meta == nil {
		return nil
	}
	if req.Params.Meta.ProgressToken == nil {
		return req.Params.Meta.AdditionalFields
	}
	m := make(map[string]any, len(req.Params.Meta.AdditionalFields)+1)
	for k, v := range req.Params.Meta.AdditionalFields {
		m[k] = v
	}
	m["progressToken"] = req.Params.Meta.ProgressToken
	return m
}

// runCall is Call, also returning the upstream's Result when the receipt recorded its
// raw result as the upstream sent it (nil otherwise: a refusal, an upstream error, a
// result the receipt holds as parsed, a REST upstream's). A front may answer with
// it, its _meta["svc/receipt"] set (withReceiptMeta), instead of encoding res;
// answersRaw says the front will, so the upstream may parse only the result's head.
func (g *Gateway) runCall(ctx context.Context, s *Session, tool string, args json.RawMessage, agentMeta map[string]any, answersRaw bool) (*mcp.CallToolResult, *upstream.Result) {
	return g.runCallWith(ctx, s, tool, args, agentMeta, answersRaw, upstream.Call{})
}

// runCallWith is runCall with what the agent's side adds to the upstream.Call
// (relayCall: Notify and Ask, nil: dropped, refused; the agent's retry of an
// input_required result and its capabilities), the rest of which the call path fills.
func (g *Gateway) runCallWith(ctx context.Context, s *Session, tool string, args json.RawMessage, agentMeta map[string]any, answersRaw bool,
	call upstream.Call) (*mcp.CallToolResult, *upstream.Result) {
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	if res := g.refuseUnrecordable(s, tool, args); res != nil {
		return res, nil
	}
	if g.defs.pending.Load() > 0 { // tool definitions the log refused: log them first
		g.defs.retry(ctx)
	}
	c := g.newCall(s, tool, args, agentMeta)
	p, res := g.decide(ctx, c)
	if res != nil {
		return res, nil
	}
	if res := g.precommit(ctx, c, p); res != nil {
		return res, nil
	}
	var relayed relayCount
	call.Tool, call.Args, call.Meta, call.HeadOnly, call.Ask = tool, args, c.forwardMeta(), answersRaw, relayed.counting(call.Ask)
	hop := s.hop(agentMeta)
	if call.Capabilities == nil {
		call.Capabilities = hop.Capabilities
	}
	call.LogLevel = hop.LogLevel
	if _, perRequest := agentMeta[mcp.MetaKeyLogLevel].(string); perRequest {
		// An agent on 2026-07-28 asks per request: the log messages the upstream then
		// sends go to the session at that level (relayLogs).
		level := hop.LogLevel
		s.logLevel.Store(&level)
	}
	out, callErr := c.up.Call(ctx, call)
	if callErr == nil {
		relayed.passed(out.Parsed)
	}
	p.SetRelayed(relayed.record())
	// Once the call was forwarded its receipt is owed even if the agent gave up on it
	// (notifications/cancelled cancels ctx): the log's own timeouts bound the wait.
	return g.finish(context.WithoutCancel(ctx), c, p, out, callErr)
}

// refuseUnrecordable answers a call no receipt may be issued for: outside the grant's
// window (checked on every call, not only when the session opened: such a receipt
// would not verify; over HTTP the front refuses it with 403 before this), or
// arguments that are not valid JSON. Nil when the call may go on.
func (g *Gateway) refuseUnrecordable(s *Session, tool string, args json.RawMessage) *mcp.CallToolResult {
	if err := g.inWindow(s.chain); err != nil {
		return errorResult(fmt.Sprintf("Denied: the grant is no longer valid (%v); nothing was forwarded and no receipt was issued: a receipt outside the grant's window would not verify. Present a current grant.", err))
	}
	if _, err := receipt.CanonicalizeJSON(args); err != nil {
		return errorResult(fmt.Sprintf("Refused: the arguments of %s are not valid JSON (%v); nothing was forwarded and no receipt was issued, since a receipt cannot record them. Send a JSON object of UTF-8 text.", tool, err))
	}
	return nil
}

// newCall starts the receipt's record of a call from the session's grant chain.
func (g *Gateway) newCall(s *Session, tool string, args json.RawMessage, agentMeta map[string]any) *toolCall {
	leaf := s.chain.Leaf()
	principal := s.chain.Root().Principal
	c := &toolCall{s: s, tool: tool, args: args, agentMeta: agentMeta, up: g.routes.ownerOf(tool)}
	c.record = receipt.Call{
		Principal:  receipt.Principal{ID: &principal, KeyID: s.principal.KeyID, Provenance: receipt.Attested},
		Agent:      receipt.Agent{ID: leaf.Agent, Provenance: receipt.Attested},
		Delegation: &receipt.Delegation{Envelope: s.grant, Provenance: receipt.Attested},
		Session:    receipt.Session{ID: nilIfEmpty(s.ID), Provenance: receipt.Claimed},
		Model:      receipt.Model{ID: metaString(agentMeta, MetaModel), Provenance: receipt.Claimed},
		Tool:       receipt.Tool{Name: tool, Provenance: receipt.Observed},
		Args:       args,
		Facts:      map[string]receipt.Fact{},
	}
	if g.multi && c.up != nil {
		c.record.Tool.Upstream = c.up.Name()
	}
	g.defs.cite(&c.record.Tool)
	s.mu.Lock()
	if len(s.consumed) > 0 {
		c.record.Consumed = &receipt.Consumed{FactIDs: slices.Clone(s.consumed), Provenance: receipt.Observed}
	}
	s.mu.Unlock()
	c.meta = map[string]any{MetaAgent: leaf.Agent, MetaPrincipal: principal}
	return c
}

// decide runs steps 2 to 5 (arguments, scope, facts, policy) and returns the pending
// receipt of an allowed call, or the answer to a refused one (whose denied receipt is
// already logged).
func (g *Gateway) decide(ctx context.Context, c *toolCall) (*receipt.Pending, *mcp.CallToolResult) {
	deny := func(p *receipt.Pending, why string) *mcp.CallToolResult {
		return g.finishDenied(ctx, p, why, c.record.Policy.Reasons)
	}
	// 2. Arguments: a JSON object (SPEC: tools/call { name, arguments }). Anything
	// else is refused with a denied receipt that records what was sent.
	if kind := jsonKind(c.args); kind != "object" {
		c.record.Policy = g.policyRecord(PolicyDecision{Decision: receipt.Deny, Reasons: []string{"arguments are not a JSON object"}})
		p, err := g.issuer.Begin(c.record)
		if err != nil {
			return nil, errorResult(fmt.Sprintf("Refused: the arguments of %s cannot be recorded: %v; nothing was forwarded", c.tool, err))
		}
		return nil, deny(p, fmt.Sprintf("Refused: the arguments of %s must be a JSON object, got %s; nothing was forwarded", c.tool, kind))
	}
	// 3. Scope.
	leaf := c.s.chain.Leaf()
	if !leaf.HasScope(c.tool) || c.up == nil {
		why, reason := fmt.Sprintf("tool %s is outside the grant's scopes", c.tool), "outside delegated scope"
		if ups := g.routes.offeredBy(c.tool); leaf.HasScope(c.tool) && ups != nil {
			reason = fmt.Sprintf("tool offered by more than one upstream (%s)", strings.Join(ups, ", "))
			why = fmt.Sprintf("tool %s is offered by more than one upstream (%s) since their tools changed, and each tool must belong to exactly one: it is not routed until one of them drops it", c.tool, strings.Join(ups, ", "))
		} else if leaf.HasScope(c.tool) {
			why = fmt.Sprintf("no upstream offers tool %s", c.tool)
		}
		c.record.Policy = g.policyRecord(PolicyDecision{Decision: receipt.Deny, Reasons: []string{reason}})
		p, err := g.issuer.Begin(c.record)
		if err != nil {
			return nil, errorResult(err.Error())
		}
		return nil, deny(p, why)
	}
	if why := g.defs.pinRefusal(c.tool); why != "" {
		c.record.Policy = g.policyRecord(PolicyDecision{Decision: receipt.Deny, Reasons: []string{"tool definition differs from its pin"}})
		p, err := g.issuer.Begin(c.record)
		if err != nil {
			return nil, errorResult(err.Error())
		}
		return nil, deny(p, why)
	}
	p, err := g.issuer.Begin(c.record)
	if err != nil {
		return nil, errorResult(fmt.Sprintf("Refused: the call cannot be recorded: %v; nothing was forwarded", err))
	}
	c.meta[MetaReceipt] = p.ReceiptID
	// 4. Facts.
	facts, factValues, why := g.lookupFacts(ctx, c.tool, c.args, c.meta)
	c.record.Facts, c.facts = facts, factValues
	if why != "" {
		c.record.Policy = g.policyRecord(PolicyDecision{Decision: receipt.Deny, Reasons: []string{"fact lookup failed"}})
		if p, err = g.issuer.Resume(p, c.record); err != nil {
			return nil, errorResult(err.Error())
		}
		return nil, deny(p, why)
	}
	// 5. Policy.
	dec := g.policy.Decide(ctx, PolicyRequest{Agent: leaf.Agent, Tool: c.tool, Args: c.args, Facts: factValues,
		Grant: GrantContext{Principal: leaf.Principal, Scopes: leaf.Scopes}, Digest: g.policyDigest})
	c.record.Policy = g.policyRecord(dec)
	if p, err = g.issuer.Resume(p, c.record); err != nil {
		return nil, errorResult(err.Error())
	}
	if dec.Decision != receipt.Allow {
		return nil, deny(p, "")
	}
	return p, nil
}

// precommit is step 6: once the receipt is known to fit the log, a pre-committed
// tool's authorization is logged before anything reaches the upstream; when the log
// does not take it, the call is withheld (and its receipt says so). Nil when the call
// may be forwarded.
func (g *Gateway) precommit(ctx context.Context, c *toolCall, p *receipt.Pending) *mcp.CallToolResult {
	if why := g.checkReceiptFits(p, c.tool); why != "" {
		return errorResult(why)
	}
	if !g.cfg.IsPrecommit(c.tool) {
		return nil
	}
	err := g.issuer.Authorize(ctx, p)
	if err == nil {
		return nil
	}
	reason := "Not executed: the log did not commit the authorization: " + err.Error()
	b, ferr := g.issuer.Finish(ctx, p, receipt.Execution{Status: receipt.StatusWithheld, Reason: reason, Provenance: receipt.Observed})
	if ferr != nil {
		g.log.Warn("withheld receipt not logged either", "receipt", p.ReceiptID, "err", ferr)
	} else {
		g.exported(b)
	}
	return errorResult(fmt.Sprintf("%s (receipt %s)", reason, p.ReceiptID))
}

// checkReceiptFits is the step before forwarding: with a capped remote log that keeps
// whole receipts, a call whose receipt would be over the cap before any result is
// added is refused ("" when it fits or the log takes such receipts by hash).
func (g *Gateway) checkReceiptFits(p *receipt.Pending, tool string) string {
	if g.leafFits == nil || g.cfg.Log == nil || g.cfg.Log.Oversize == OversizeHash {
		return ""
	}
	leaf, err := g.issuer.Leaf(p, receipt.Execution{Status: receipt.StatusExecuted, Result: json.RawMessage(`null`), Provenance: receipt.Observed})
	if err != nil {
		return fmt.Sprintf("Not executed: the receipt of %s cannot be built: %v; nothing was forwarded", tool, err)
	}
	size := len(leaf)
	fits := g.leafFits(leaf)
	if g.cfg.IsPrecommit(tool) {
		// The receipt will embed the authorization (about the same statement again,
		// base64 in the payload) with its tree head and proof.
		size += (len(leaf) + 2048) * 4 / 3
		fits = size+64 <= pipeline.MaxLeafBytes // 64: JSON escapes of the envelope's quotes
	}
	if fits {
		return ""
	}
	return fmt.Sprintf("Not executed: the receipt of this call would be about %d bytes before any result, more than the log takes in one append (%d bytes); nothing was forwarded and no receipt was issued. Send smaller arguments (or the operator sets log.oversize to \"hash\")", size, pipeline.MaxLeafBytes)
}

// forwardMeta is step 7's meta: the agent's keys except the svc/ ones it cannot set
// and the io.modelcontextprotocol/ ones of the agent's hop (its protocol revision,
// which the gateway's hop to the upstream negotiated for itself; what of them the
// upstream's revision takes goes as upstream.Call's Capabilities and LogLevel), then
// the gateway's own and the facts it observed.
func (c *toolCall) forwardMeta() map[string]any {
	fwd := map[string]any{}
	for k, v := range c.agentMeta {
		if !strings.HasPrefix(k, "svc/") && !strings.HasPrefix(k, "io.modelcontextprotocol/") {
			fwd[k] = v
		}
	}
	maps.Copy(fwd, c.meta)
	if len(c.facts) > 0 {
		obs := map[string]any{}
		for k, v := range c.facts {
			obs[k] = json.RawMessage(v)
		}
		fwd[MetaObserved] = obs
	}
	return fwd
}

// execution records what the upstream did, and (step 8) remembers the facts it
// declares it served for the session's later receipts. raw is the result as the
// upstream sent it (nil: res re-encoded is recorded).
func (c *toolCall) execution(res *mcp.CallToolResult, raw json.RawMessage, callErr error) receipt.Execution {
	if callErr != nil {
		return receipt.Execution{Status: receipt.StatusError, Error: callErr.Error(), Provenance: receipt.Observed}
	}
	if raw == nil {
		raw = marshalResult(res)
	}
	exec := receipt.Execution{Status: receipt.StatusExecuted, Result: raw, Provenance: receipt.Observed}
	if res.IsError {
		exec.Status = receipt.StatusFailed
	}
	if res.Meta == nil {
		return exec
	}
	if sig, ok := res.Meta.AdditionalFields[MetaUpstreamSignature]; ok {
		if b, err := json.Marshal(sig); err == nil {
			exec.Upstream = b
		}
	}
	if ids, ok := res.Meta.AdditionalFields[MetaFacts].([]any); ok {
		c.s.mu.Lock()
		for _, id := range ids {
			if str, ok := id.(string); ok && !slices.Contains(c.s.consumed, str) {
				c.s.consumed = append(c.s.consumed, str)
			}
		}
		c.s.mu.Unlock()
	}
	return exec
}

// marshalResult is a parsed result as mcp-go encodes it.
func marshalResult(res *mcp.CallToolResult) json.RawMessage {
	b, err := json.Marshal(res)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

// finish is step 9: the receipt is durable before the result is returned, with the
// receipt's id in the result's meta. The receipt records the upstream's raw result
// when there is one, or, if a receipt cannot record it as it stands (invalid UTF-8,
// duplicate names, which mcp-go's parse repaired or dropped), the result as mcp-go
// parsed it. The raw result is returned too when the receipt recorded it.
func (g *Gateway) finish(ctx context.Context, c *toolCall, p *receipt.Pending, out *upstream.Result, callErr error) (*mcp.CallToolResult, *upstream.Result) {
	var res *mcp.CallToolResult
	var raw *upstream.Result // out, when it carries the raw result
	var rawJSON json.RawMessage
	if callErr == nil {
		res = out.Parsed
		if out.Raw != nil {
			raw, rawJSON = out, out.Raw
		}
	}
	b, err := g.issuer.Finish(ctx, p, c.execution(res, rawJSON, callErr))
	if errors.Is(err, receipt.ErrResultJSON) && raw != nil && callErr == nil {
		res, callErr = raw.Full() // a head-only parse has no content to record
		raw = nil
		b, err = g.issuer.Finish(ctx, p, c.execution(res, nil, callErr))
	}
	if err != nil {
		g.log.Error("receipt not logged after the upstream acted", "receipt", p.ReceiptID, "tool", c.tool, "err", err)
		return errorResult(fmt.Sprintf("The upstream action has already happened, but the log did not take its receipt, so no receipt was issued: %v", err)), nil
	}
	g.exported(b)
	if callErr != nil {
		return errorResult(fmt.Sprintf("Upstream error: %s (receipt %s)", callErr.Error(), p.ReceiptID)), nil
	}
	if res.Meta == nil {
		res.Meta = &mcp.Meta{}
	}
	if res.Meta.AdditionalFields == nil {
		res.Meta.AdditionalFields = map[string]any{}
	}
	res.Meta.AdditionalFields[MetaReceipt] = p.ReceiptID
	return res, raw
}
