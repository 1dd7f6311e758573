package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// mcpUpstream is an MCP server reached over stdio or Streamable HTTP.
type mcpUpstream struct {
	name string
	c    *client.Client
	// list is the upstream's tools, replaced whole when Relist finds them changed.
	list atomic.Pointer[toolList]
	// child is a stdio upstream's process; with raw set, tools/call takes the fast
	// path (upstreamstdio.go), which speaks only the protocol versions before
	// 2026-07-28 (the later ones put more into every request's _meta).
	child *childProcess
	raw   bool
	// http makes a Streamable HTTP upstream's tools/call (httpcall.go); nil for stdio
	// and for an upstream on the stateless revision (2026-07-28), which mcp-go's
	// client serves.
	http *httpCaller
	// modern: the upstream is on the stateless revision (2026-07-28): it asks for
	// input with an input_required result per request (callModern).
	modern bool
	// timeout bounds one tools/call (Config.TimeoutMs).
	timeout time.Duration
	// caps are the capabilities the upstream declared (Offers).
	caps mcp.ServerCapabilities
	// toolsChanged is told of a stdio upstream's notifications/tools/list_changed
	// (WatchTools).
	toolsChanged toolsWatch
	// logs is given each notifications/message the upstream sends where no call
	// owns it (WatchLogs): a stdio upstream's, or one on the 2026-07-28 revision.
	logs atomic.Pointer[func(json.RawMessage)]
	// stopListen ends a Streamable HTTP upstream's standalone stream (httpCaller.listen).
	stopListen context.CancelFunc
	// progress routes a stdio upstream's notifications/progress to the call that
	// asked for them: the gateway's own token for the call (progressTokens) → the
	// call's relay. The upstream's stdout is shared by every call.
	progress sync.Map
}

// progressTokens numbers the tokens the gateway gives stdio upstreams.
var progressTokens atomic.Int64

// relayNotifications installs the routing of the notifications an upstream sends
// outside httpCaller's streams (a stdio upstream's; one on the 2026-07-28 revision
// over HTTP, whose streams mcp-go's client reads): progress to the call whose token
// it names (withProgress), log messages to WatchLogs, list_changed to WatchTools.
func (u *mcpUpstream) relayNotifications() {
	handle := func(n mcp.JSONRPCNotification) {
		switch n.Method {
		case string(mcp.MethodNotificationToolsListChanged):
			u.toolsChanged.fire()
		case string(mcp.MethodNotificationMessage):
			if f := u.logs.Load(); f != nil {
				if params, err := json.Marshal(n.Params); err == nil {
					(*f)(params)
				}
			}
		case string(mcp.MethodNotificationProgress):
			tok, _ := n.Params.AdditionalFields["progressToken"].(string)
			if f, ok := u.progress.Load(tok); ok {
				if params, err := json.Marshal(n.Params); err == nil {
					f.(func(json.RawMessage))(params)
				}
			}
		}
	}
	if u.child != nil {
		// On the transport: mcp-go's client installs its own handlers in Start,
		// which a stdio upstream's client is not given (its process is started here).
		u.c.GetTransport().SetNotificationHandler(handle)
		return
	}
	u.c.OnNotification(handle)
}

// withProgress gives a stdio upstream's call a progress token of the gateway's own
// in place of the agent's (tokens of different agents may be equal), and routes the
// progress for it back to call.Notify with the agent's token; the returned func
// ends the routing.
func (u *mcpUpstream) withProgress(call Call) (Call, func()) {
	agentToken, ok := call.Meta["progressToken"]
	if !ok || call.Notify == nil || u.http != nil {
		return call, func() {}
	}
	tok := fmt.Sprintf("svc-progress-%d", progressTokens.Add(1))
	meta := make(map[string]any, len(call.Meta))
	for k, v := range call.Meta {
		meta[k] = v
	}
	meta["progressToken"] = tok
	notify := call.Notify
	u.progress.Store(tok, func(params json.RawMessage) {
		var p map[string]any
		if json.Unmarshal(params, &p) != nil {
			return
		}
		p["progressToken"] = agentToken
		if b, err := json.Marshal(p); err == nil {
			notify(string(mcp.MethodNotificationProgress), b)
		}
	})
	call.Meta = meta
	return call, func() { u.progress.Delete(tok) }
}

// dialMCP starts (stdio) or connects to (HTTP) an MCP upstream and lists its tools.
func dialMCP(ctx context.Context, name string, u *Config) (*mcpUpstream, error) {
	var c *client.Client
	var child *childProcess
	var hc *httpCaller
	var err error
	closeAll := func() {
		c.Close()
		if child != nil {
			_ = child.stop()
		}
	}
	switch {
	case u.Command != "":
		env := make([]string, 0, len(u.Env))
		for k, v := range u.Env {
			env = append(env, k+"="+v)
		}
		sort.Strings(env)
		// client.NewStdioMCPClient, with the transport keeping raw results, over
		// pipes the tools/call fast path shares.
		var t *transport.Stdio
		if child, t, err = startChild(u.Command, env, u.Args); err == nil {
			c = client.NewClient(rawStdio{t}, oneRound, discoverWait)
		}
	default:
		if c, hc, err = dialHTTP(ctx, name, u); hc == nil {
			return nil, err // the token's variable, named in err
		}
	}
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", name, err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = ClientInfo
	if u.URL != "" {
		// Relayed to the agent within the call (Call.Ask); an agent that does not
		// offer them answers with an error the upstream gets.
		init.Params.Capabilities.Sampling = &mcp.SamplingCapability{}
		init.Params.Capabilities.Elicitation = &mcp.ElicitationCapability{}
	}
	ir, err := c.Initialize(ctx, init)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("upstream %s: initialize: %w", name, err)
	}
	tools, rawTools, err := listTools(ctx, c)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("upstream %s: tools/list: %w", name, err)
	}
	if hc != nil {
		hc.version = ir.ProtocolVersion
		if mcp.IsModernProtocol(ir.ProtocolVersion) {
			// The stateless revision puts the protocol's own keys into every
			// request's _meta and asks for input in its result, not on a stream:
			// mcp-go's client speaks it.
			hc = nil
		}
	}
	modern := mcp.IsModernProtocol(ir.ProtocolVersion)
	up := &mcpUpstream{name: name, c: c, child: child, http: hc, modern: modern, raw: child != nil && !modern, caps: ir.Capabilities}
	up.list.Store(&toolList{tools: tools, raws: rawTools})
	if hc != nil {
		lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		up.stopListen = stop
		go hc.listen(lctx)
	}
	if hc == nil {
		up.relayNotifications()
	}
	return up, nil
}

// dialHTTP starts mcp-go's client of a Streamable HTTP upstream (its transport
// keeping raw results) and the httpCaller that makes its tools/call requests; hc is
// nil when the token's environment variable is missing (err says which).
func dialHTTP(ctx context.Context, name string, u *Config) (*client.Client, *httpCaller, error) {
	var opts []transport.StreamableHTTPCOption
	hc := &httpCaller{url: u.URL, headers: map[string]string{}, client: &http.Client{}, userName: name}
	if u.TokenEnv != "" {
		tok, err := Env("upstream "+name+": tokenEnv", u.TokenEnv)
		if err != nil {
			return nil, nil, err
		}
		hc.headers["Authorization"] = "Bearer " + tok
		opts = append(opts, transport.WithHTTPHeaders(hc.headers))
	}
	// client.NewStreamableHttpClient, with the transport keeping raw results.
	t, err := transport.NewStreamableHTTP(u.URL, opts...)
	if err != nil {
		return nil, hc, err
	}
	hc.t = t
	c := client.NewClient(rawHTTP{t}, oneRound, discoverWait)
	return c, hc, c.Start(ctx)
}

func (u *mcpUpstream) Name() string { return u.name }

// Relays reports whether the upstream may send notifications or requests within a
// call (a Streamable HTTP upstream: its call's event stream) or answer one with
// input_required (a stdio upstream on the 2026-07-28 revision), which the gateway
// relays to the agent through mcp-go's server. A Streamable HTTP upstream on
// 2026-07-28 keeps the fronts' fast paths: the HTTP front's relays its input_required
// itself (callStream), the stdio front's hands a call of it to mcp-go (AsksForInput).
func (u *mcpUpstream) Relays() bool { return u.http != nil || (u.modern && u.child != nil) }

// AsksForInput reports whether the upstream may answer a call with input_required
// (one on the 2026-07-28 revision).
func (u *mcpUpstream) AsksForInput() bool { return u.modern }

func (u *mcpUpstream) Tools() []mcp.Tool { return u.list.Load().tools }

func (u *mcpUpstream) Close() error {
	if u.stopListen != nil {
		u.stopListen()
	}
	err := u.c.Close()
	if u.child != nil {
		err = errors.Join(err, u.child.stop())
	}
	return err
}

// Call forwards one tools/call: over the stdio fast path when the upstream takes it
// (callRaw), else through mcp-go's client, whose transport keeps the raw result
// (keepRaw) for the Result.
func (u *mcpUpstream) Call(ctx context.Context, call Call) (*Result, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, u.timeout, errCallTimeout{u.timeout})
	defer cancel()
	call, done := u.withProgress(call)
	defer done()
	res, err := u.call(ctx, call)
	if err != nil && context.Cause(ctx) != nil && ctx.Err() == context.DeadlineExceeded {
		return nil, context.Cause(ctx)
	}
	return res, err
}

// errCallTimeout is a call that had no answer within the upstream's timeoutMs.
type errCallTimeout struct{ d time.Duration }

func (e errCallTimeout) Error() string {
	return fmt.Sprintf("no answer within %s (the upstream's timeoutMs); the upstream was told the call is cancelled", e.d)
}

func (u *mcpUpstream) call(ctx context.Context, call Call) (*Result, error) {
	if u.raw {
		return u.callRaw(ctx, call)
	}
	if u.http != nil {
		return u.callHTTP(ctx, call)
	}
	return u.callModern(ctx, call)
}

// oneRound has mcp-go's client make one request per tools/call and return an
// input_required result as ErrMaxInputRoundTripsExceeded (its raw result kept in the
// slot), instead of answering the upstream's input requests itself: callModern
// relays them.
var oneRound = client.WithMaxInputRoundTrips(1)

// discoverWait is how long Dial waits for the answer to server/discover, the probe
// for the 2026-07-28 revision, before taking the upstream for an earlier one's:
// mcp-go's 5 s is less than a loaded machine takes to start a Node.js server, which
// then was served on the earlier revision. An upstream on an earlier revision
// answers the probe at once (method not found); Dial's own bound is 60 s.
var discoverWait = client.WithDiscoverTimeout(30 * time.Second)

// maxInputRounds bounds the requests of one call to an upstream that keeps asking
// for input (as mcp-go's client bounds its own).
const maxInputRounds = 10

// callModern is Call to an upstream on the 2026-07-28 revision, through mcp-go's
// client: each round is one tools/call request, the first carrying the agent's
// inputResponses and requestState (a retry of its own). An input_required result is
// relayed per request: with call.Ask (an agent on an earlier revision, which the
// gateway may ask within its call) each input request goes to the agent and the call
// is made again with the answers and the requestState; without (an agent on
// 2026-07-28 too) the result is returned as sent, for the agent to answer with a
// retry of its own.
func (u *mcpUpstream) callModern(ctx context.Context, call Call) (*Result, error) {
	rt := roundTrip{responses: call.InputResponses, state: call.RequestState, caps: call.Capabilities, level: call.LogLevel}
	for round := 1; ; round++ {
		res, err := u.callOnce(ctx, call, &rt)
		if err != nil || call.Ask == nil || !needsInput(res.Raw) {
			return res, err
		}
		if round == maxInputRounds {
			return nil, fmt.Errorf("the upstream asked for input %d times in one call", round)
		}
		if rt.responses, rt.state, err = answerInput(ctx, res.Raw, call.Ask); err != nil {
			return nil, err
		}
	}
}

// answerInput asks the agent each input request of an input_required result and
// returns the answers (inputResponses, by the requests' keys) and the result's
// requestState, for the call's next round.
func answerInput(ctx context.Context, raw json.RawMessage, ask func(context.Context, string, json.RawMessage) (json.RawMessage, error)) (json.RawMessage, json.RawMessage, error) {
	var r struct {
		InputRequests map[string]struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		} `json:"inputRequests"`
		RequestState json.RawMessage `json:"requestState"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, nil, fmt.Errorf("the upstream's input_required result: %w", err)
	}
	answers := make(map[string]json.RawMessage, len(r.InputRequests))
	for key, req := range r.InputRequests {
		a, err := ask(ctx, req.Method, req.Params)
		if err != nil {
			return nil, nil, fmt.Errorf("the agent did not answer the upstream's %s (%q): %w", req.Method, key, err)
		}
		answers[key] = a
	}
	b, err := json.Marshal(answers)
	return b, r.RequestState, err
}

// callOnce is one tools/call request through mcp-go's client, whose transport keeps
// the raw result (keepRawResult) and adds rt to the request (sendKeepingRaw).
func (u *mcpUpstream) callOnce(ctx context.Context, call Call, rt *roundTrip) (*Result, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = call.Tool
	req.Params.Arguments = call.Args
	req.Params.Meta = &mcp.Meta{AdditionalFields: call.Meta}
	ctx, slot := withRawSlot(ctx)
	slot.rt = rt
	res, err := u.c.CallTool(ctx, req)
	if errors.Is(err, client.ErrMaxInputRoundTripsExceeded) && needsInput(slot.json) {
		raw := slot.json
		if res, err = mcp.ParseCallToolResult(&raw); err != nil {
			return nil, err
		}
		return &Result{Parsed: res, Raw: slot.json}, nil
	}
	if err != nil && slot.err != nil {
		return nil, slot.err
	}
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, errors.New("empty result")
	}
	out := &Result{Parsed: res, Raw: slot.json, NoMeta: slot.noMeta}
	if slot.parsed != nil {
		out.Parsed = slot.parsed // parsed in one pass by the transport (keepRawResult)
	}
	return out, nil
}

// callHTTP is Call to a Streamable HTTP upstream (httpcall.go), the raw result
// parsed once as mcp-go's client would parse it.
func (u *mcpUpstream) callHTTP(ctx context.Context, call Call) (*Result, error) {
	raw, err := u.http.call(ctx, call)
	if err != nil {
		return nil, err
	}
	res, hasMeta, onePass := ParseCallToolResult(raw)
	if !onePass {
		if res, err = mcp.ParseCallToolResult(&raw); err != nil {
			return nil, err
		}
	}
	return &Result{Parsed: res, Raw: raw, NoMeta: onePass && !hasMeta}, nil
}

// callRaw is Call over the stdio fast path: the raw result is parsed once, as
// mcp-go's client would parse it; only its head when the front answers with the raw
// result and the content is plain text.
func (u *mcpUpstream) callRaw(ctx context.Context, call Call) (*Result, error) {
	raw, err := u.child.call(ctx, call.Tool, call.Args, call.Meta)
	if err != nil {
		return nil, err
	}
	var res *mcp.CallToolResult
	var hasMeta, onePass, head bool
	if call.HeadOnly {
		res, hasMeta, head = parseHead(raw)
		onePass = head
	}
	if !head {
		res, hasMeta, onePass = ParseCallToolResult(raw)
	}
	if !onePass {
		if needsInput(raw) {
			return nil, errors.New("the upstream asked for more input (a multi round trip result), which the gateway does not give")
		}
		if res, err = mcp.ParseCallToolResult(&raw); err != nil {
			return nil, err
		}
	}
	return &Result{Parsed: res, Raw: raw, NoMeta: onePass && !hasMeta, HeadOnly: head}, nil
}

// needsInput reports whether a tools/call result asks the client for more input.
func needsInput(raw json.RawMessage) bool {
	var r struct {
		ResultType    mcp.ResultType  `json:"resultType"`
		InputRequests json.RawMessage `json:"inputRequests"`
		RequestState  json.RawMessage `json:"requestState"`
	}
	return json.Unmarshal(raw, &r) == nil && (r.ResultType == mcp.ResultTypeInputRequired || r.InputRequests != nil || r.RequestState != nil)
}

// rawStdio and rawHTTP are mcp-go's transports of an MCP upstream with
// SendRequest wrapped (sendKeepingRaw): the raw result of a tools/call goes into the
// slot its context carries (withRawSlot, set by mcpUpstream.Call alone). mcp-go
// looks for a transport's capabilities by type assertion (bidirectional requests;
// the HTTP connection, whose protocol version header it sets and to which it sends
// no notifications/cancelled; the legacy protocol), so a wrapper must keep every
// other method of the transport it wraps, as embedding does. One type cannot serve
// both: whether it has SetProtocolVersion (transport.HTTPConnection) is what tells
// mcp-go an HTTP upstream from a stdio one, and a method set cannot depend on what
// is wrapped; Go cannot embed a type parameter. Hence one embedding type per
// transport around the one SendRequest, as mcp-go's own transport.NewLogging picks
// one of four wrapper types by the interfaces its transport has.
type rawStdio struct{ *transport.Stdio }

func (t rawStdio) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	return sendKeepingRaw(ctx, req, t.Stdio.SendRequest)
}

type rawHTTP struct{ *transport.StreamableHTTP }

func (t rawHTTP) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	return sendKeepingRaw(ctx, req, t.StreamableHTTP.SendRequest)
}

// sendKeepingRaw sends a request through a transport's own SendRequest and keeps
// the raw result of a tools/call in the context's slot.
func sendKeepingRaw(ctx context.Context, req transport.JSONRPCRequest,
	send func(context.Context, transport.JSONRPCRequest) (*transport.JSONRPCResponse, error)) (*transport.JSONRPCResponse, error) {
	if slot, ok := ctx.Value(rawSlotKey{}).(*rawSlot); ok && slot.rt != nil && req.Method == string(mcp.MethodToolsCall) {
		slot.rt.addTo(req.Params)
	}
	resp, err := send(ctx, req)
	if err == nil {
		keepRawResult(ctx, req, resp)
		keepRawError(ctx, req, resp)
	}
	return resp, err
}

// keepRawError keeps a tools/call's JSON-RPC error in the context's slot as sent:
// mcp-go's client turns it into a Go error of its own (AsError), which for -32021
// keeps only a data.capability member, where the official SDKs send
// data.requiredCapabilities, so the agent would not learn what was missing.
func keepRawError(ctx context.Context, req transport.JSONRPCRequest, resp *transport.JSONRPCResponse) {
	slot, ok := ctx.Value(rawSlotKey{}).(*rawSlot)
	if !ok || resp == nil || resp.Error == nil || req.Method != string(mcp.MethodToolsCall) {
		return
	}
	e := &rpcError{Code: resp.Error.Code, Message: resp.Error.Message}
	if resp.Error.Data != nil {
		e.Data, _ = json.Marshal(resp.Error.Data)
	}
	slot.err = e
}

// rawSlot receives the raw JSON result of the tools/call made with its context (the
// last one, when the upstream asked for input in between), and that result parsed in
// one pass (nil when ParseCallToolResult left it to mcp-go).
type rawSlot struct {
	rt     *roundTrip // what the request adds on the 2026-07-28 revision; nil: nothing
	list   bool       // keep a tools/list result instead (listTools)
	json   json.RawMessage
	err    *rpcError // the call's JSON-RPC error as sent (keepRawError)
	parsed *mcp.CallToolResult
	noMeta bool // the result has no member named _meta in any case (known when parsed)
}

type rawSlotKey struct{}

func withRawSlot(ctx context.Context) (context.Context, *rawSlot) {
	slot := &rawSlot{}
	return context.WithValue(ctx, rawSlotKey{}, slot), slot
}

func keepRawResult(ctx context.Context, req transport.JSONRPCRequest, resp *transport.JSONRPCResponse) {
	if resp == nil || resp.Error != nil {
		return
	}
	slot, ok := ctx.Value(rawSlotKey{}).(*rawSlot)
	if !ok {
		return
	}
	if slot.list && req.Method == string(mcp.MethodToolsList) {
		slot.json = resp.Result // listTools on the 2026-07-28 revision
		return
	}
	if req.Method != string(mcp.MethodToolsCall) {
		return
	}
	slot.json, slot.parsed, slot.noMeta = resp.Result, nil, false
	if res, hasMeta, ok := ParseCallToolResult(resp.Result); ok {
		// mcp-go's own parse (ParseCallToolResult) decodes the result twice and
		// validates it three times (its content a fourth); it now parses a stub,
		// and mcpUpstream.Call returns this parse instead (nothing else reads what
		// the client returns for a call made with a slot).
		slot.parsed, slot.noMeta = res, !hasMeta
		resp.Result = parsedStub
	}
}

// parsedStub is the smallest result mcp-go's client parses as a complete one.
var parsedStub = json.RawMessage(`{"content":[]}`)

// roundTrip is what a tools/call request to an upstream on the 2026-07-28 revision
// carries besides mcp-go's params: the answers to the upstream's last input_required
// result and its requestState, and the agent's capabilities and log level in _meta
// (each nil or "" when there is none).
type roundTrip struct {
	responses, state, caps json.RawMessage
	level                  mcp.LoggingLevel
}

// addTo adds rt to a request's params, which mcp-go's client hands its transport as
// a map of members on that revision (applyRequestMeta), _meta carrying the protocol's
// keys; mcp-go itself sets neither member on a first round.
func (rt *roundTrip) addTo(params any) {
	fields, ok := params.(map[string]json.RawMessage)
	if !ok {
		return
	}
	if rt.responses != nil {
		fields["inputResponses"] = rt.responses
	}
	if rt.state != nil {
		fields["requestState"] = rt.state
	}
	if rt.caps == nil && rt.level == "" {
		return
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(fields["_meta"], &meta) != nil || meta == nil {
		return
	}
	if rt.caps != nil {
		meta[mcp.MetaKeyClientCapabilities] = rt.caps
	}
	if rt.level != "" {
		meta[mcp.MetaKeyLogLevel], _ = json.Marshal(rt.level)
	}
	if b, err := json.Marshal(meta); err == nil {
		fields["_meta"] = b
	}
}
