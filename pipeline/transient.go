package pipeline

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream API error codes of a cluster that is electing or lacks a quorum for a
// while (nats-server's jetstream_errors_generated.go): they pass without anyone
// doing anything.
const (
	codeClusterNoPeers   = 10005 // no suitable peers for placement (a node down)
	codeClusterNotLeader = 10009 // JetStream cluster can not handle request
	codeStreamOffline    = 10118 // stream is offline
	codeClusteringNeeded = 10010 // 503 too, but the server runs without a cluster
)

// Transient reports whether err is a broker failure that passes by itself: no
// answer in time, no responder, the connection between servers, or a JetStream
// cluster that is electing a leader or lacks a quorum ("JetStream system temporarily
// unavailable", any other 503 but a server without JetStream, "no suitable peers",
// "stream is offline"). A broker-facing step that fails with one retries with
// backoff instead of stopping the process (docs/design/cluster.md); any other error
// (a refused configuration, JetStream not enabled, a wrong password) is returned.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled, apiErr.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabledForAccount,
			apiErr.ErrorCode == codeClusteringNeeded:
			return false
		case apiErr.Code == 503, apiErr.ErrorCode == codeClusterNoPeers, apiErr.ErrorCode == codeClusterNotLeader, apiErr.ErrorCode == codeStreamOffline:
			return true
		}
	}
	for _, e := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders, jetstream.ErrNoStreamResponse,
		jetstream.ErrNoHeartbeat, jetstream.ErrServerShutdown, nats.ErrConnectionReconnecting, nats.ErrDisconnected, nats.ErrStaleConnection} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
