package logservice

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline"
)

// The direct path (pipeline.DirectSubject): a request SVC_APPEND did not
// acknowledge storing is also published on svc.direct.<tenant> over core NATS, which
// needs no Raft group. Every process listens there on one subscription; the tenant's
// holder puts the copy on the tenant's route, behind the requests of its lane, and
// the others drop it. After a crash of the node leading SVC_APPEND (or the lane's
// consumer), the holder's sequencer then commits the request as soon as SVC_LEAVES
// has elected its leader, instead of after the slowest of the three elections.
//
// A direct copy is acknowledged to no one (nothing stored it) and is not durable:
// lost with the holder, the stream's copy, once stored, comes to the next holder
// through its lane, or the producer's own retry does. The copy and the stream's copy
// of one request are answered with one index by the sequencer's idempotency, and the
// stream's copy is acknowledged then, leaving the work queue.

// listenDirect subscribes to every tenant's direct copies until the returned stop.
func (f *appendFeed) listenDirect() (stop func(), err error) {
	sub, err := f.js.Conn().Subscribe(pipeline.DirectPrefix+">", f.direct)
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// direct hands a direct copy to its tenant's sequencer, if it runs here.
func (f *appendFeed) direct(m *nats.Msg) {
	tenant := strings.TrimPrefix(m.Subject, pipeline.DirectPrefix)
	f.mu.Lock()
	r := f.routes[tenant]
	f.mu.Unlock()
	if r != nil && !r.putUpTo(directMsg{m}, directBacklog) {
		f.log.Debug("direct copy dropped: the tenant's backlog is full; its stream copy or the producer's resend carries it", "tenant", tenant)
	}
}

// directBacklog bounds the requests waiting on a tenant's route that a direct copy
// may join: the stream's copies are bounded by the lane's MaxAckPending, a broker
// client's direct copies by this (one dropped costs nothing: the request's stream
// copy, or the producer's next resend, carries it).
const directBacklog = 1024

// errNotStored answers Metadata for a direct copy, which no stream holds.
var errNotStored = errors.New("a direct copy of an append request: not stored in a stream")

// directMsg is a direct copy as the sequencer takes requests (jetstream.Msg): its
// acknowledgements are no-ops, since no stream holds it.
type directMsg struct{ m *nats.Msg }

var _ jetstream.Msg = directMsg{}

func (d directMsg) Metadata() (*jetstream.MsgMetadata, error) { return nil, errNotStored }
func (d directMsg) Data() []byte                              { return d.m.Data }
func (d directMsg) Headers() nats.Header                      { return d.m.Header }
func (d directMsg) Subject() string                           { return d.m.Subject }
func (d directMsg) Reply() string                             { return "" }
func (d directMsg) Ack() error                                { return nil }
func (d directMsg) DoubleAck(context.Context) error           { return nil }
func (d directMsg) Nak() error                                { return nil }
func (d directMsg) NakWithDelay(time.Duration) error          { return nil }
func (d directMsg) InProgress() error                         { return nil }
func (d directMsg) Term() error                               { return nil }
func (d directMsg) TermWithReason(string) error               { return nil }
