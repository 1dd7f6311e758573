package store

import (
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// metricsMiddleware counts, by projection, the groups committed, the stream
// messages they covered, the failed attempts and the time spent, and keeps the
// position the last committed group reached.
func metricsMiddleware(st *Stats, name string) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			start := time.Now()
			out, err := h(msg)
			took := time.Since(start)
			first, _ := strconv.ParseUint(msg.Metadata.Get(mdFirst), 10, 64)
			last, _ := strconv.ParseUint(msg.Metadata.Get(mdLast), 10, 64)
			st.add(name, func(p *ProjectionStats) {
				p.Busy += took
				if err != nil {
					p.Failed++
					return
				}
				p.Groups++
				p.Messages += last - first + 1
				p.Position = max(p.Position, last)
			})
			return out, err
		}
	}
}
