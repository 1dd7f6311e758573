// Package wire is the line layer both ends of the gateway share: JSON-RPC messages
// written as whole lines, one writer at a time (LineWriter), and the scan of a JSON
// object of the usual shape (ScanObject) with which the fast paths read the agent's
// tools/call request and a stdio upstream's answer without decoding them.
//
// A scan finds the members of a JSON object spelt exactly and declines anything
// else, which its caller then decodes with encoding/json; it does not validate the
// values, which the callers do (json.Valid, once). Each scanner built on it is held
// to encoding/json or mcp-go by a fuzz target (FuzzDecodeToolCall in package gateway,
// FuzzScanAnswer and FuzzParseHead in package upstream).
package wire

import (
	"io"
	"sync"
)

// LineWriter writes whole lines to the agent or to a stdio upstream, one writer at
// a time: the fast path and mcp-go each write a message with one Write.
type LineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewLineWriter writes to w.
func NewLineWriter(w io.Writer) *LineWriter { return &LineWriter{w: w} }

func (l *LineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Close closes the underlying writer when it is a Closer, without waiting for a
// write in progress (one blocked on a stuck reader fails instead).
func (l *LineWriter) Close() error {
	if c, ok := l.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
