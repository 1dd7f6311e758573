package consume

import (
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// NewRouter is a Watermill router for consumers: it waits up to 10 s for the
// handlers in hand when closed, and logs nothing (each handler reports through its
// Chain).
func NewRouter() (*message.Router, error) {
	return message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
}

// Chain is the middleware of one handler.
type Chain struct {
	// PerSecond throttles the handler to this many calls a second (watermill's
	// Throttle); 0: no limit.
	PerSecond int
	// Measure, when not nil, sees every call with its outcome after the dead letters
	// below it were kept ([Measure] builds one).
	Measure message.HandlerMiddleware
	// DeadLetters keeps what the handler refused for good in SVC_DEAD ([Keep]).
	DeadLetters message.HandlerMiddleware
	// Retry retries a transient failure in hand.
	Retry Retry
	// Timeout bounds one attempt: the message's context ends after it (watermill's
	// Timeout), and a timeout is a transient failure. > 0.
	Timeout time.Duration
}

// Handle adds the handler name, reading topic through sub, to r with c's middleware,
// outermost first: throttle, measure, dead letters, retry, timeout, then h.
func Handle(r *message.Router, name, topic string, sub message.Subscriber, h message.NoPublishHandlerFunc, c Chain) {
	var mws []message.HandlerMiddleware
	if c.PerSecond > 0 {
		mws = append(mws, middleware.NewThrottle(int64(c.PerSecond), time.Second).Middleware)
	}
	if c.Measure != nil {
		mws = append(mws, c.Measure)
	}
	if c.DeadLetters != nil {
		mws = append(mws, c.DeadLetters)
	}
	mws = append(mws, c.Retry.Middleware(), middleware.Timeout(c.Timeout))
	r.AddConsumerHandler(name, topic, sub, h).AddMiddleware(mws...)
}

// Retry retries a transient failure Retries times in hand with exponential backoff
// (×2) and jitter (±50 %) from MinBackoff to MaxBackoff (watermill's Retry), each try
// with a fresh context. An error wrapping Permanent is not retried. When the retries
// are spent the error goes up and the message back to the stream.
type Retry struct {
	Retries                int           // tries after the first; 0 or more
	MinBackoff, MaxBackoff time.Duration // the first wait and the longest
	Permanent              error         // the mark of a failure no retry cures
	Failed                 func(error)   // hears each failed attempt; nil: none
}

// Middleware is r as a Watermill middleware.
func (r Retry) Middleware() message.HandlerMiddleware {
	return middleware.Retry{
		MaxRetries:          r.Retries,
		InitialInterval:     r.MinBackoff,
		MaxInterval:         r.MaxBackoff,
		Multiplier:          2,
		RandomizationFactor: 0.5,
		ResetContextOnRetry: true,
		ShouldRetry: func(p middleware.RetryParams) bool {
			if r.Failed != nil {
				r.Failed(p.Err)
			}
			return !errors.Is(p.Err, r.Permanent)
		},
	}.Middleware
}

// Measure times each handler call and hands the message, the time it took and its
// outcome to record.
func Measure(record func(msg *message.Message, took time.Duration, err error)) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			start := time.Now()
			out, err := h(msg)
			record(msg, time.Since(start), err)
			return out, err
		}
	}
}
