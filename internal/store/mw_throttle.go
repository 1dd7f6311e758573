package store

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// throttleMiddleware limits a projection to perSecond groups (transactions) a second
// (watermill's Throttle); 0 means no limit and no middleware.
func throttleMiddleware(perSecond int) message.HandlerMiddleware {
	if perSecond <= 0 {
		return nil
	}
	return middleware.NewThrottle(int64(perSecond), time.Second).Middleware
}
