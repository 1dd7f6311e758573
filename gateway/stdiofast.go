package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"svc.dev/svc/gateway/internal/wire"
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

// stdioFront is the fast path of one stdio session.
type stdioFront struct {
	g     *Gateway
	s     *Session
	out   *wire.LineWriter
	log   *slog.Logger
	slots chan struct{}
	calls sync.WaitGroup

	inflight inflightCalls
	workers  callWorkers

	mu      sync.Mutex
	stopped bool // stop was called: start no more calls
}

// stop refuses further calls and waits for those started.
func (f *stdioFront) stop() {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	f.calls.Wait()
	f.workers.close()
}

// serve reads the agent's lines until in ends, handling plain tools/call requests
// and passing every other line to mcp-go (rest). It returns when in ends or fails,
// once every call it started has been answered.
func (f *stdioFront) serve(ctx context.Context, in io.Reader, rest io.Writer) error {
	defer f.workers.close()
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
		if id, ok := decodeToolsList(line); ok {
			if _, err := f.out.Write(f.g.toolsListLine(f.s, id)); err != nil {
				return fmt.Errorf("answering tools/list: %w", err)
			}
			continue
		}
		if env, ok := f.g.passThroughRequest(line); ok {
			// Answered on a worker, as a call is: reading goes on (cancellations,
			// pings, the agent's answers to the gateway's requests).
			select {
			case f.slots <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			f.run(ctx, env.ID, func(ctx context.Context) []byte { return f.g.answerPassThrough(ctx, f.s, env) })
			continue
		}
		if req, ok := decodeToolCall(line); ok && f.g.fastTool(req.name, false) {
			select {
			case f.slots <- struct{}{}:
				f.start(ctx, req)
				continue
			default: // every fast slot busy: mcp-go queues it and reading goes on (cancellations, pings)
			}
		}
		f.inflight.noteCancel(line)
		if _, err := rest.Write(line); err != nil {
			return fmt.Errorf("passing a message to mcp-go: %w", err)
		}
	}
}

// start runs one call on a worker of its own, cancellable by notifications/cancelled.
func (f *stdioFront) start(ctx context.Context, req *toolCallRequest) {
	f.run(ctx, req.id, func(ctx context.Context) []byte { return f.g.answerCall(ctx, f.log, f.s, req, nil) })
}

// run answers request id on a worker of its own, cancellable by
// notifications/cancelled; the caller took a slot, which the answer gives back.
func (f *stdioFront) run(ctx context.Context, id json.RawMessage, answer func(context.Context) []byte) {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		<-f.slots
		return
	}
	f.calls.Add(1)
	f.mu.Unlock()
	cctx, done := f.inflight.start(ctx, id)
	f.workers.run(func() {
		defer func() {
			done()
			<-f.slots
			f.calls.Done()
		}()
		if _, err := f.out.Write(answer(cctx)); err != nil {
			f.log.Warn("writing an answer to the agent", "err", err)
		}
	})
}

// callWorkers are the goroutines the fast path's calls run on, kept between calls
// (at most maxFastCalls, as the calls), the one idle last taking the next call: a call
// on a new goroutine starts on a small stack that the call path grows, copying it,
// several times (runtime.copystack was 4.7% of the stdio gateway's CPU profile).
type callWorkers struct {
	mu     sync.Mutex
	idle   []chan func() // the idle workers' inboxes, the last idle last
	closed bool
}

// run runs job on an idle worker, or a new one.
func (w *callWorkers) run(job func()) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		inbox := w.idle[n-1]
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		inbox <- job
		return
	}
	w.mu.Unlock()
	go w.work(make(chan func(), 1), job)
}

func (w *callWorkers) work(inbox chan func(), job func()) {
	for ok := true; ok; job, ok = <-inbox {
		job()
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, inbox)
		w.mu.Unlock()
	}
}

// close ends the idle workers, and each busy one when its call ends.
func (w *callWorkers) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, inbox := range w.idle {
		close(inbox)
	}
	w.idle = nil
}
