package store

import (
	"errors"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// retryMiddleware retries a transient failure (the database does not answer, a
// timeout) cfg.Retries times in hand with exponential backoff and jitter (watermill's
// Retry); poison is not retried. When the retries are spent the group is nacked and
// the subscriber hands the same group again after a backoff, forever: a transient
// failure never skips a message.
func retryMiddleware(cfg RouterConfig, name string, st *Stats) message.HandlerMiddleware {
	return middleware.Retry{
		MaxRetries:          cfg.Retries,
		InitialInterval:     cfg.MinBackoff,
		MaxInterval:         cfg.MaxBackoff,
		Multiplier:          2,
		RandomizationFactor: 0.5,
		ResetContextOnRetry: true,
		ShouldRetry: func(p middleware.RetryParams) bool {
			st.failed(name, p.Err)
			return !errors.Is(p.Err, ErrPoison)
		},
	}.Middleware
}
