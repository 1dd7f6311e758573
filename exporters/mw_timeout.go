package exporters

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// TimeoutMiddleware bounds one attempt: the message's context ends after d
// (watermill's Timeout), which an exporter's request and a database projection's
// transaction (internal/store) honour. A timeout is a transient failure.
func TimeoutMiddleware(d time.Duration) message.HandlerMiddleware {
	return middleware.Timeout(d)
}
