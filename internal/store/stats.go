package store

import (
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"svc.dev/svc/pipeline/consume"
)

// Stats counts what the projection handlers did, by handler name.
type Stats = consume.Stats[ProjectionStats]

// ProjectionStats are one projection's counts since the process started.
type ProjectionStats struct {
	Position  uint64        // stream sequence of the last committed group
	Groups    uint64        // transactions committed
	Messages  uint64        // stream messages those groups covered
	Failed    uint64        // attempts that failed (each retry counts)
	LastError string        // the last failure, "" if none
	Busy      time.Duration // time spent in the handler
}

// Stats reports what the projection handlers of s did.
func (s *Store) Stats() map[string]ProjectionStats { return s.stats().Snapshot() }

// projectionStats are the counts of s's projections.
type projectionStats struct{ *Stats }

func (s *Store) stats() projectionStats {
	s.statsOnce.Do(func() { s.st = &Stats{} })
	return projectionStats{s.st}
}

func (st projectionStats) failed(name string, err error) {
	st.Add(name, func(p *ProjectionStats) { p.LastError = err.Error() })
}

// measure counts, by projection, the groups committed, the stream messages they
// covered, the failed attempts and the time spent, and keeps the position the last
// committed group reached.
func measure(st projectionStats, name string) message.HandlerMiddleware {
	return consume.Measure(func(msg *message.Message, took time.Duration, err error) {
		first, _ := strconv.ParseUint(msg.Metadata.Get(mdFirst), 10, 64)
		last, _ := strconv.ParseUint(msg.Metadata.Get(mdLast), 10, 64)
		st.Add(name, func(p *ProjectionStats) {
			p.Busy += took
			if err != nil {
				p.Failed++
				return
			}
			p.Groups++
			p.Messages += last - first + 1
			p.Position = max(p.Position, last)
		})
	})
}
