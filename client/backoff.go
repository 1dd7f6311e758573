package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the wait before retry attempt+1: 200 ms doubling, with up to 50% jitter,
// at least the server's Retry-After when that is short, and never more than 5 s.
func Backoff(attempt, retryAfter int) time.Duration {
	d := time.Duration(200<<attempt) * time.Millisecond
	d += time.Duration(rand.Int64N(int64(d) / 2))
	if ra := time.Duration(retryAfter) * time.Second; ra > d {
		d = ra
	}
	return min(d, 5*time.Second)
}

// Sleep waits d or until ctx is done, whichever comes first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
