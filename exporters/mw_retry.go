package exporters

import (
	"errors"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// retryMiddleware retries a transient failure cfg.Retries times in hand with
// exponential backoff and jitter (watermill's Retry); a permanent refusal
// (ErrPermanent) is not retried. Each failure is recorded on the status board. When
// the retries are spent the error goes up and the message back to the stream.
func retryMiddleware(cfg RouterConfig, exporter string, st *statusBoard) message.HandlerMiddleware {
	return middleware.Retry{
		MaxRetries:          cfg.Retries,
		InitialInterval:     cfg.Queue.MinBackoff,
		MaxInterval:         cfg.Queue.MaxBackoff,
		Multiplier:          2,
		RandomizationFactor: 0.5,
		ResetContextOnRetry: true,
		ShouldRetry: func(p middleware.RetryParams) bool {
			st.failed(exporter, p.Err)
			return !errors.Is(p.Err, ErrPermanent)
		},
	}.Middleware
}
