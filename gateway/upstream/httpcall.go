package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// A Streamable HTTP upstream's tools/call is made here, not through mcp-go's client:
// what the upstream sends on the call's own event stream belongs to that call, and
// mcp-go's client hands a stream's notifications to one handler for the whole
// connection, without saying which request they came with. Here each notification
// (notifications/progress, notifications/message, ...) goes to the call's Notify,
// and a request the upstream makes within the call (sampling, elicitation, roots)
// to its Ask, whose answer is posted back. The session id and protocol version are
// those mcp-go's client negotiated at Dial.

// maxEventBytes caps one event of an upstream's stream (an answer with large content
// is one event); maxAnswerBytes caps a plain JSON answer.
const (
	maxEventBytes  = 64 << 20
	maxAnswerBytes = 64 << 20
)

// httpCaller makes tools/call requests to a Streamable HTTP upstream.
type httpCaller struct {
	url string
	// toolsChanged is told of notifications/tools/list_changed on any of the
	// upstream's streams (readEvents; WatchTools).
	toolsChanged toolsWatch
	headers      map[string]string // Authorization, when the config names a token
	t            *transport.StreamableHTTP
	version      string // the protocol version negotiated at Dial
	client       *http.Client
	ids          atomic.Int64
	userName     string // the upstream's name, for errors

	mu    sync.Mutex
	calls map[int64]Call // the calls in flight, by request id
}

// rpcMessage is any JSON-RPC message on an upstream's stream.
type rpcMessage struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

// rpcError is a JSON-RPC error; Data is kept as sent (a missing capability's name).
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Error is the upstream's error as the agent's text shows it: the message, with its
// data when there is some (-32021 names the missing capability there).
func (e *rpcError) Error() string {
	if len(e.Data) > 0 && string(e.Data) != "null" {
		return fmt.Sprintf("%s (code %d, data %s)", e.Message, e.Code, e.Data)
	}
	return fmt.Sprintf("%s (code %d)", e.Message, e.Code)
}

// call sends one tools/call and returns its raw result.
func (h *httpCaller) call(ctx context.Context, call Call) (json.RawMessage, error) {
	id := h.ids.Add(1)
	h.mu.Lock()
	if h.calls == nil {
		h.calls = map[int64]Call{}
	}
	h.calls[id] = call
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.calls, id)
		h.mu.Unlock()
	}()
	params := map[string]any{"name": call.Tool, "arguments": json.RawMessage(argsOrEmpty(call.Args))}
	if len(call.Meta) > 0 {
		params["_meta"] = call.Meta
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
	if err != nil {
		return nil, fmt.Errorf("tools/call request: %w", err)
	}
	defer func() {
		if ctx.Err() != nil {
			h.cancelled(ctx, id)
		}
	}()
	resp, err := h.post(ctx, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("the upstream answered HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var msg *rpcMessage
	if mt == "text/event-stream" {
		msg, err = h.readStream(ctx, resp.Body, id, call)
	} else {
		msg, err = readAnswer(resp.Body)
	}
	if err != nil {
		return nil, err
	}
	if msg.Error != nil {
		return nil, msg.Error
	}
	if msg.Result == nil {
		return nil, errors.New("the upstream's answer has neither result nor error")
	}
	return msg.Result, nil
}

func argsOrEmpty(a json.RawMessage) json.RawMessage {
	if len(a) == 0 {
		return json.RawMessage(`{}`)
	}
	return a
}

// post sends one JSON-RPC message on the upstream's session.
func (h *httpCaller) post(ctx context.Context, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	h.setHeaders(req)
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("upstream %s: %w", h.userName, err)
	}
	return resp, nil
}

// setHeaders sets the session's headers: its id, protocol version and token.
func (h *httpCaller) setHeaders(req *http.Request) {
	if sid := h.t.GetSessionId(); sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	if h.version != "" {
		req.Header.Set(mcp.HeaderProtocolVersion, h.version)
	}
	for k, v := range h.headers {
		req.Header.Set(k, v)
	}
}

func readAnswer(r io.Reader) (*rpcMessage, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxAnswerBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the upstream's answer: %w", err)
	}
	if len(b) > maxAnswerBytes {
		return nil, fmt.Errorf("the upstream's answer is over %d bytes", maxAnswerBytes)
	}
	var msg rpcMessage
	if err := json.Unmarshal(b, &msg); err != nil {
		return nil, fmt.Errorf("the upstream's answer is not JSON-RPC: %w", err)
	}
	return &msg, nil
}

// maxResumes bounds how often one call's stream is resumed (GET with Last-Event-ID)
// after the upstream closed it without the answer.
const maxResumes = 8

// stream is one call's event stream: the id of its last event and the retry delay
// the upstream asked for, to resume it.
type stream struct {
	lastID string
	retry  time.Duration
}

// readStream reads the call's event stream until the answer to id, resuming it (GET
// with Last-Event-ID, after the upstream's retry delay) when the upstream closes it
// first, as the Streamable HTTP transport allows: notifications go to call.Notify,
// the upstream's requests to call.Ask (answered on a POST of their own).
func (h *httpCaller) readStream(ctx context.Context, body io.ReadCloser, id int64, call Call) (*rpcMessage, error) {
	st := &stream{}
	for resumes := 0; ; resumes++ {
		msg, err := h.readEvents(ctx, body, fmt.Sprint(id), call, st)
		body.Close()
		if msg != nil || err != nil {
			return msg, err
		}
		if st.lastID == "" || resumes == maxResumes {
			return nil, errors.New("the upstream closed the call's event stream without an answer")
		}
		select {
		case <-time.After(st.retry):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if body, err = h.resume(ctx, st.lastID); err != nil {
			return nil, err
		}
	}
}

// resume opens the session's stream again from the event after lastID.
func (h *httpCaller) resume(ctx context.Context, lastID string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", lastID)
	h.setHeaders(req)
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("upstream %s: resuming the call's event stream: %w", h.userName, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("upstream %s: resuming the call's event stream: HTTP %d", h.userName, resp.StatusCode)
	}
	return resp.Body, nil
}

// readEvents reads events until the answer to want (returned), the stream's end (nil,
// nil) or an error.
func (h *httpCaller) readEvents(ctx context.Context, body io.Reader, want string, call Call, st *stream) (*rpcMessage, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) > 0 {
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) {
			case "data":
				data = append(append(data, value...), '\n')
			case "id":
				st.lastID = string(value)
			case "retry":
				if ms, err := strconv.Atoi(string(value)); err == nil && ms >= 0 && ms <= 60000 {
					st.retry = time.Duration(ms) * time.Millisecond
				}
			}
			continue
		}
		// An empty line ends the event.
		ev := bytes.TrimSpace(data)
		data = data[:0]
		if len(ev) == 0 {
			continue // a priming event
		}
		var msg rpcMessage
		if err := json.Unmarshal(ev, &msg); err != nil {
			continue
		}
		switch {
		case msg.Method != "" && len(msg.ID) == 0:
			if msg.Method == string(mcp.MethodNotificationToolsListChanged) {
				h.toolsChanged.fire() // on any stream: a call's or the standalone one
			}
			if call.Notify != nil {
				call.Notify(msg.Method, msg.Params)
			}
		case msg.Method != "":
			h.answerRequest(ctx, &msg, call)
		case string(msg.ID) == want:
			return &msg, nil
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, nil // the stream ended (or broke): resumed when it can be
}

// answerRequest relays a request the upstream made within a call to the agent (Ask)
// and posts the agent's answer back; without Ask it is refused as MCP's
// method-not-found.
func (h *httpCaller) answerRequest(ctx context.Context, msg *rpcMessage, call Call) {
	answer := map[string]any{"jsonrpc": "2.0", "id": msg.ID}
	var res json.RawMessage
	err := error(&rpcError{Code: mcp.METHOD_NOT_FOUND, Message: "the gateway relays no " + msg.Method + " for this call"})
	if call.Ask != nil {
		res, err = call.Ask(ctx, msg.Method, msg.Params)
	}
	var re *rpcError
	switch {
	case err == nil:
		answer["result"] = res
	case errors.As(err, &re):
		answer["error"] = re
	default:
		answer["error"] = &rpcError{Code: mcp.INTERNAL_ERROR, Message: err.Error()}
	}
	b, _ := json.Marshal(answer)
	h.postDetached(ctx, b)
}

// postDetached posts msg on the upstream's session on a goroutine of its own, past
// the end of ctx (the call's) but within 10 seconds: an upstream that never answers
// the POST holds no goroutine for longer.
func (h *httpCaller) postDetached(ctx context.Context, msg []byte) {
	go func() {
		pctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer stop()
		if resp, err := h.post(pctx, msg); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
		}
	}()
}

// cancelled tells the upstream a call was given up (notifications/cancelled), so it
// may stop working on it.
func (h *httpCaller) cancelled(ctx context.Context, id int64) {
	reason := "cancelled"
	if c := context.Cause(ctx); c != nil {
		reason = c.Error()
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": map[string]any{"requestId": id, "reason": reason}})
	h.postDetached(ctx, b)
}

// onlyCall is the one call in flight, when there is exactly one.
func (h *httpCaller) onlyCall() (Call, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.calls) != 1 {
		return Call{}, false
	}
	for _, c := range h.calls {
		return c, true
	}
	return Call{}, false
}

// listen reads the session's standalone event stream (GET) until ctx ends, opening
// it again after it ends. An upstream may send there what belongs to a call without
// saying which (the TypeScript SDK's server.request outside a handler's extra, as the
// conformance suite's reference server does for sampling and elicitation): it goes
// to the call in flight when there is exactly one, and a request is refused
// otherwise. An upstream that answers the GET with anything but a stream (405: it
// offers none) is not asked again; one that cannot be reached is asked again after a
// second.
func (h *httpCaller) listen(ctx context.Context) {
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
		if err != nil {
			return
		}
		req.Header.Set("Accept", "text/event-stream")
		h.setHeaders(req)
		resp, err := h.client.Do(req)
		if err == nil && resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return // no such stream here (405, or a refusal): not asked again
		}
		if err == nil {
			only := Call{
				Notify: func(method string, params json.RawMessage) {
					if c, ok := h.onlyCall(); ok && c.Notify != nil {
						c.Notify(method, params)
					}
				},
				Ask: func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
					c, ok := h.onlyCall()
					if !ok || c.Ask == nil {
						return nil, &rpcError{Code: mcp.INVALID_REQUEST, Message: "the gateway relays " + method + " only within a call, and cannot tell which call this is for"}
					}
					return c.Ask(ctx, method, params)
				},
			}
			_, _ = h.readEvents(ctx, resp.Body, "", only, &stream{})
			resp.Body.Close()
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// NewRPCError is a JSON-RPC error an Ask returns to have it sent to the upstream as
// it stands (the agent's own error).
func NewRPCError(code int, message string, data json.RawMessage) error {
	return &rpcError{Code: code, Message: message, Data: data}
}
