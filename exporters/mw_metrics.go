package exporters

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// metricsMiddleware counts each delivery's outcome and the time spent in it, by
// exporter: accepted, kept as a dead letter (the dead-letter middleware below it marks
// the message and returns nil), or failed (the message goes back to the stream).
func metricsMiddleware(stats *RouterStats, exporter string, count *counters) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			start := time.Now()
			out, err := h(msg)
			took := time.Since(start)
			dead := msg.Metadata.Get(mdDead) != ""
			stats.add(exporter, func(s *HandlerStats) {
				s.Busy += took
				switch {
				case err != nil:
					s.Failed++
				case dead:
					s.Dead++
				default:
					s.Delivered++
				}
			})
			if count != nil {
				switch {
				case err == nil && dead:
					count.dropped.Add(1)
				case err == nil:
					count.exported.Add(1)
				}
			}
			return out, err
		}
	}
}
