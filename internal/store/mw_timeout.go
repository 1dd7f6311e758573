package store

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// timeoutMiddleware bounds one attempt (one transaction): the group's context ends
// after d (watermill's Timeout) and the transaction rolls back. A timeout is
// transient: the group is tried again.
func timeoutMiddleware(d time.Duration) message.HandlerMiddleware {
	return middleware.Timeout(d)
}
