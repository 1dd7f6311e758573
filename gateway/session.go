package gateway

import (
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Session is one agent connection: its grant, and the facts upstreams declared to it.
type Session struct {
	ID        string // MCP session id over HTTP; "" on stdio
	grant     *receipt.Envelope
	chain     *receipt.Chain
	principal signer.PublicKey
	grantKey  [32]byte // HTTP: SHA-256 of the grant presented on initialize

	mu       sync.Mutex
	consumed []string // fact ids declared via svc/facts, in order, without repeats

	logLevel atomic.Pointer[mcp.LoggingLevel] // the agent's logging/setLevel; nil: none yet
}

// wantsLog reports whether the session's agent asked for log messages of level l:
// at or above the level of its logging/setLevel, error when it sent none (as
// mcp-go's sessions, whose level the gateway's in-call relay reads).
func (s *Session) wantsLog(l mcp.LoggingLevel) bool {
	min := mcp.LoggingLevelError
	if p := s.logLevel.Load(); p != nil {
		min = *p
	}
	return l.ShouldSendTo(min)
}

// Agent is the agent the session's grant names.
func (s *Session) Agent() string { return s.chain.Leaf().Agent }
