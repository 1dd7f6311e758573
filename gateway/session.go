package gateway

import (
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/gateway/upstream"
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
	caps     atomic.Pointer[json.RawMessage]  // the client capabilities of the agent's initialize; nil: none
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

// hop is what the agent's side declares to an upstream on the 2026-07-28 revision
// (upstream.Hop), from the agent's request _meta when it is on that revision too,
// else from its session: the capabilities of its initialize and the level of its
// logging/setLevel (none when it sent none).
func (s *Session) hop(agentMeta map[string]any) upstream.Hop {
	var h upstream.Hop
	if caps, ok := agentMeta[mcp.MetaKeyClientCapabilities]; ok {
		h.Capabilities, _ = json.Marshal(caps)
	} else if p := s.caps.Load(); p != nil {
		h.Capabilities = *p
	}
	if level, ok := agentMeta[mcp.MetaKeyLogLevel].(string); ok {
		h.LogLevel = mcp.LoggingLevel(level)
	} else if p := s.logLevel.Load(); p != nil {
		h.LogLevel = *p
	}
	return h
}

// Agent is the agent the session's grant names.
func (s *Session) Agent() string { return s.chain.Leaf().Agent }
