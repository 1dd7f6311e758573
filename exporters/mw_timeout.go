package exporters

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// timeoutMiddleware bounds one delivery attempt: the message's context ends after d
// (watermill's Timeout), which the exporter's request honours. A timeout is a
// transient failure.
func timeoutMiddleware(d time.Duration) message.HandlerMiddleware {
	return middleware.Timeout(d)
}
