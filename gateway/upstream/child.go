package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway/internal/wire"
)

// A stdio upstream is a child process the gateway starts. Its tools/call requests
// take a path of their own: the request line is written directly and the answer's
// raw result handed to the call, where mcp-go's client would encode the request
// through its types, decode every answer line three times and the result again.
// mcp-go's stdio transport still does everything else (initialize, tools/list,
// notifications, the upstream's own requests): it runs over the same pipes
// (transport.NewIO), reading every line the fast path does not claim, and writes
// through the same lock.

// firstRawID is the first JSON-RPC id of the fast path's requests: far above the
// ids mcp-go's client counts up from 1, and exact in every JSON implementation.
const firstRawID = 1 << 40

// childProcess is a stdio upstream's process and its pipes, demultiplexed.
type childProcess struct {
	cmd   *exec.Cmd
	stdin *wire.LineWriter
	rest  *io.PipeWriter // the lines for mcp-go's transport

	next    atomic.Int64
	mu      sync.Mutex
	pending map[int64]chan rawAnswer
	closed  bool  // stdout ended: no answer will come
	readErr error // why
	exited  chan struct{}
}

// rawAnswer is the answer to a fast-path request: its result or error, raw.
type rawAnswer struct {
	result json.RawMessage
	err    *mcp.JSONRPCErrorDetails
}

// startChild starts command with env added to the gateway's environment (as mcp-go's
// stdio transport does) and returns it with the mcp-go transport over its pipes,
// started. The child's stderr is drained and dropped, as mcp-go's transport keeps it
// for a reader nobody attaches.
func startChild(command string, env, args []string) (*childProcess, *transport.Stdio, error) {
	cmd := exec.Command(command, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = io.Discard
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("stdin pipe: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("stdout pipe: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting %s: %w", command, err)
	}
	pr, pw := io.Pipe()
	p := &childProcess{cmd: cmd, stdin: wire.NewLineWriter(stdin), rest: pw,
		pending: map[int64]chan rawAnswer{}, exited: make(chan struct{})}
	p.next.Store(firstRawID)
	go p.read(stdout)
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t := transport.NewIO(pr, p.stdin, nil)
	if err := t.Start(context.Background()); err != nil {
		p.stop()
		return nil, nil, err
	}
	return p, t, nil
}

// answerEnvelope is what the reader decodes of each line of the child's stdout.
type answerEnvelope struct {
	ID     json.RawMessage          `json:"id"`
	Method string                   `json:"method"`
	Result json.RawMessage          `json:"result"`
	Error  *mcp.JSONRPCErrorDetails `json:"error"`
}

// read hands each answer to a fast-path request to its caller and passes every other
// line to mcp-go's transport, until stdout ends.
func (p *childProcess) read(stdout io.Reader) {
	r := bufio.NewReaderSize(stdout, 64<<10)
	var err error
	for {
		var line []byte
		line, err = r.ReadBytes('\n')
		if len(line) > 0 && !p.claim(line) {
			if _, werr := p.rest.Write(line); werr != nil {
				err = werr
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.rest.CloseWithError(err)
	p.mu.Lock()
	p.closed, p.readErr = true, err
	for id, ch := range p.pending {
		close(ch)
		delete(p.pending, id)
	}
	p.mu.Unlock()
}

// claim delivers a line that answers a pending fast-path request (true). The line
// is read only as far as the envelope, the result staying raw: scanned when it has
// the usual shape (scanAnswer), else decoded.
func (p *childProcess) claim(line []byte) bool {
	if !bytes.Contains(line, []byte(`"id"`)) {
		return false // a notification
	}
	n, result, scanned := scanAnswer(line)
	a := rawAnswer{result: result}
	if !scanned {
		var env answerEnvelope
		if json.Unmarshal(line, &env) != nil || env.Method != "" || (env.Result == nil && env.Error == nil) {
			return false
		}
		var ok bool
		if n, ok = rawID(env.ID); !ok {
			return false
		}
		a = rawAnswer{result: env.Result, err: env.Error}
	} else if n < firstRawID {
		return false
	}
	p.mu.Lock()
	ch := p.pending[n]
	delete(p.pending, n)
	p.mu.Unlock()
	if ch == nil {
		return false // not (or no longer) awaited: mcp-go's transport drops it
	}
	ch <- a
	return true
}

// rawID is the fast path's id an answer carries, if it carries one.
func rawID(id json.RawMessage) (int64, bool) {
	if len(id) == 0 || id[0] < '0' || id[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	if err != nil || n < firstRawID {
		return 0, false
	}
	return n, true
}

// errChildGone: the upstream's stdout ended while a call waited for its answer.
var errChildGone = errors.New("the upstream process closed its output")

// call sends one tools/call request and waits for its raw result.
func (p *childProcess) call(ctx context.Context, tool string, args json.RawMessage, meta map[string]any) (json.RawMessage, error) {
	id := p.next.Add(1)
	line, err := toolCallLine(id, tool, args, meta)
	if err != nil {
		return nil, err
	}
	ch := make(chan rawAnswer, 1)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, transport.NewError(fmt.Errorf("%w: %w", transport.ErrTransportClosed, errChildGone))
	}
	p.pending[id] = ch
	p.mu.Unlock()
	if _, err := p.stdin.Write(line); err != nil {
		p.forget(id)
		return nil, transport.NewError(fmt.Errorf("failed to write request: %w", err))
	}
	select {
	case a, ok := <-ch:
		if !ok {
			return nil, transport.NewError(fmt.Errorf("%w: %w", transport.ErrTransportClosed, errChildGone))
		}
		if a.err != nil {
			return nil, a.err.AsError()
		}
		return a.result, nil
	case <-ctx.Done():
		p.forget(id)
		p.notifyCancelled(id, ctx.Err())
		return nil, transport.NewError(ctx.Err())
	}
}

func (p *childProcess) forget(id int64) {
	p.mu.Lock()
	delete(p.pending, id)
	p.mu.Unlock()
}

// notifyCancelled tells the upstream a request was given up (MCP's
// notifications/cancelled), so it may stop working on it.
func (p *childProcess) notifyCancelled(id int64, why error) {
	n := mcp.JSONRPCNotification{JSONRPC: mcp.JSONRPC_VERSION}
	n.Method = string(mcp.MethodNotificationCancelled)
	n.Params.AdditionalFields = map[string]any{"requestId": id, "reason": why.Error()}
	b, err := json.Marshal(n)
	if err == nil {
		_, _ = p.stdin.Write(append(b, '\n'))
	}
}

// toolCallLine is a tools/call request line: the arguments as sent (compacted: a
// request is one line), the meta as mcp-go encodes a Meta (a map: sorted keys).
func toolCallLine(id int64, tool string, args json.RawMessage, meta map[string]any) ([]byte, error) {
	name, err := json.Marshal(tool)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Grow(len(args) + len(tool) + 256)
	buf.WriteString(`{"jsonrpc":"2.0","id":`)
	buf.WriteString(strconv.FormatInt(id, 10))
	buf.WriteString(`,"method":"tools/call","params":{"name":`)
	buf.Write(name)
	if len(args) > 0 {
		buf.WriteString(`,"arguments":`)
		if err := json.Compact(&buf, args); err != nil {
			return nil, fmt.Errorf("arguments: %w", err)
		}
	}
	m := []byte(`{}`) // mcp-go writes a Meta without fields so
	if len(meta) > 0 {
		if m, err = json.Marshal(meta); err != nil {
			return nil, fmt.Errorf("_meta: %w", err)
		}
	}
	buf.WriteString(`,"_meta":`)
	buf.Write(m)
	buf.WriteString("}}\n")
	return buf.Bytes(), nil
}

// stop ends the child as mcp-go's transport does: stdin closed, then SIGTERM after
// 2 s, then SIGKILL after 3 more.
func (p *childProcess) stop() error {
	_ = p.stdin.Close()
	// mcp-go's transport sees the end of its input (EOF, which it does not report),
	// and a line for it after that is dropped (the writer is closed). Closing the
	// reader instead made every normal stop log "Error reading from stdout ... read/
	// write on closed pipe" at ERROR.
	_ = p.rest.CloseWithError(io.EOF)
	for _, step := range []struct {
		wait time.Duration
		sig  os.Signal
	}{{2 * time.Second, syscall.SIGTERM}, {3 * time.Second, os.Kill}, {3 * time.Second, nil}} {
		select {
		case <-p.exited:
			return nil
		case <-time.After(step.wait):
		}
		if step.sig != nil {
			_ = p.cmd.Process.Signal(step.sig)
		}
	}
	return transport.ErrChildShutdownTimeout
}
