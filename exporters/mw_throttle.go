package exporters

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// ThrottleMiddleware limits a handler to perSecond calls a second (watermill's
// Throttle): an exporter's deliveries, or a database projection's transactions
// (internal/store). 0 means no limit and no middleware.
func ThrottleMiddleware(perSecond int) message.HandlerMiddleware {
	if perSecond <= 0 {
		return nil
	}
	return middleware.NewThrottle(int64(perSecond), time.Second).Middleware
}
