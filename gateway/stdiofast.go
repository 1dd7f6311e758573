package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
)

// The stdio front reads the agent's lines itself. A plain tools/call request
// (decodeToolCall) goes straight to the call path and its answer is written here:
// the upstream's result as sent with _meta["svc/receipt"] set when the receipt
// recorded it so, otherwise mcp-go's encoding of the result. Every other line
// (initialize, tools/list, notifications, responses to the gateway's requests,
// anything the fast path declines) is passed on, in order, to mcp-go's stdio server
// through a pipe; both write whole lines to stdout through one lock. Measured by
// `go tool task bench:gateway`: mcp-go's server decodes each request five times
// (once per kind of response it might be, then as a message, then as the request)
// and encodes the answer through a map.

// maxFastCalls bounds the tool calls the fast path runs at once; a line beyond waits
// (mcp-go's stdio server runs 5 and queues 100).
const maxFastCalls = 32

// lineWriter writes whole lines to the agent or to a stdio upstream, one writer at
// a time: the fast path and mcp-go each write a message with one Write.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Close closes the underlying writer when it is a Closer, without waiting for a
// write in progress (one blocked on a stuck reader fails instead).
func (l *lineWriter) Close() error {
	if c, ok := l.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// stdioFront is the fast path of one stdio session.
type stdioFront struct {
	g     *Gateway
	s     *Session
	out   *lineWriter
	log   *slog.Logger
	slots chan struct{}
	calls sync.WaitGroup

	mu       sync.Mutex
	inflight map[string]*context.CancelFunc // by the request id as mcp-go keys it (cancelKey)
	stopped  bool                           // stop was called: start no more calls
}

// stop refuses further calls and waits for those started.
func (f *stdioFront) stop() {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	f.calls.Wait()
}

// serve reads the agent's lines until in ends, handling plain tools/call requests
// and passing every other line to mcp-go (rest). It returns when in ends or fails,
// once every call it started has been answered.
func (f *stdioFront) serve(ctx context.Context, in io.Reader, rest io.Writer) error {
	defer f.calls.Wait()
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			// A last line without its newline goes to mcp-go, which drops it as it did.
			if len(line) > 0 {
				_, _ = rest.Write(line)
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading stdin: %w", err)
		}
		if req, ok := decodeToolCall(line); ok && f.g.owner[req.name] != nil {
			select {
			case f.slots <- struct{}{}:
				f.start(ctx, req)
				continue
			default: // every fast slot busy: mcp-go queues it and reading goes on (cancellations, pings)
			}
		}
		f.noteCancel(line)
		if _, err := rest.Write(line); err != nil {
			return fmt.Errorf("passing a message to mcp-go: %w", err)
		}
	}
}

// start runs one call on its own goroutine, cancellable by notifications/cancelled.
func (f *stdioFront) start(ctx context.Context, req *toolCallRequest) {
	cctx, cancel := context.WithCancel(ctx)
	key, token := cancelKey(req.id), &cancel
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		cancel()
		<-f.slots
		return
	}
	f.inflight[key] = token // a second call with the same id takes over the key
	f.calls.Add(1)
	f.mu.Unlock()
	go func() {
		defer func() {
			f.mu.Lock()
			if f.inflight[key] == token {
				delete(f.inflight, key)
			}
			f.mu.Unlock()
			cancel()
			<-f.slots
			f.calls.Done()
		}()
		if _, err := f.out.Write(f.run(cctx, req)); err != nil {
			f.log.Warn("writing the answer to a tool call", "err", err)
		}
	}()
}

// run is the call path for one request; a panic is answered as mcp-go answers one.
func (f *stdioFront) run(ctx context.Context, req *toolCallRequest) (line []byte) {
	defer func() {
		if r := recover(); r != nil {
			f.log.Error("panic recovered in a tool call", "panic", r)
			line = errorLine(req.id, mcp.INTERNAL_ERROR, fmt.Sprintf("internal panic: %v", r))
		}
	}()
	res, raw := f.g.call(context.WithValue(ctx, answersRawKey{}, true), f.s, req.name, requestArgsRaw(req.args), req.meta)
	return resultLine(req.id, res, raw)
}

// requestArgsRaw is requestArgs for a decoded request: the raw arguments (mcp-go's
// RawArguments) when present.
func requestArgsRaw(args json.RawMessage) json.RawMessage {
	if len(args) == 0 {
		return nil
	}
	return args
}

// resultLine is the answer to a request: the upstream's raw result with the receipt's
// id in its _meta when the call returned one, else res as mcp-go encodes it.
func resultLine(id json.RawMessage, res *mcp.CallToolResult, raw *rawResult) []byte {
	if raw != nil && res.Meta != nil {
		if rid, ok := res.Meta.AdditionalFields[MetaReceipt].(string); ok {
			if b, ok := withReceiptMeta(raw.json, rid, raw.noMeta); ok {
				return appendResultLine(make([]byte, 0, len(b)+len(id)+32), id, b)
			}
		}
	}
	if raw != nil && raw.headOnly {
		if full, err := raw.full(); err == nil { // res holds only the head
			res.Content, res.StructuredContent = full.Content, full.StructuredContent
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return errorLine(id, mcp.INTERNAL_ERROR, fmt.Sprintf("encoding the result: %v", err))
	}
	return appendResultLine(make([]byte, 0, len(b)+len(id)+32), id, b)
}

// errorLine is a JSON-RPC error answer as mcp-go writes one.
func errorLine(id json.RawMessage, code int, message string) []byte {
	var v any
	_ = json.Unmarshal(id, &v)
	b, _ := json.Marshal(mcp.JSONRPCError{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(v), Error: mcp.NewJSONRPCErrorDetails(code, message, nil)})
	return append(b, '\n')
}

// cancelKey is a request id as notifications/cancelled names it, decoded as mcp-go
// decodes both (a Go value, printed).
func cancelKey(id json.RawMessage) string {
	var v any
	_ = json.Unmarshal(id, &v)
	return fmt.Sprint(v)
}

// noteCancel cancels the fast-path call a notifications/cancelled line names, if
// any; the line still goes to mcp-go, for the requests it serves.
func (f *stdioFront) noteCancel(line []byte) {
	var n struct {
		Method string `json:"method"`
		Params struct {
			RequestID json.RawMessage `json:"requestId"`
		} `json:"params"`
	}
	if !containsCancelled(line) || json.Unmarshal(line, &n) != nil || n.Method != string(mcp.MethodNotificationCancelled) || n.Params.RequestID == nil {
		return
	}
	key := cancelKey(n.Params.RequestID)
	f.mu.Lock()
	cancel := f.inflight[key]
	f.mu.Unlock()
	if cancel != nil {
		(*cancel)()
	}
}

func containsCancelled(line []byte) bool {
	return bytes.Contains(line, []byte(mcp.MethodNotificationCancelled))
}
