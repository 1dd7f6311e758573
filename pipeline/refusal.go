package pipeline

import (
	"errors"
	"fmt"

	"svc.dev/svc/receipt"
)

// Why an append is refused. A sequencer or an HTTP front answers a [*Refusal] naming
// one of these; callers match them with errors.Is, and only the HTTP front maps them to
// statuses (internal/logserver). Every refusal also matches receipt.ErrLogUnavailable
// (ErrUnavailable) or receipt.ErrLogRefused (the others), which is what an issuer
// distinguishes.
var (
	// ErrInvalid: the request is malformed (not a leaf, a leaf hash of the wrong size,
	// a leaf that is not valid UTF-8). Retrying cannot help.
	ErrInvalid = errors.New("invalid append request")
	// ErrTooLarge: the leaf or the body is over its size limit.
	ErrTooLarge = errors.New("append too large")
	// ErrQuota: the tenant's plan allows no more appends this month; RetryAfter reaches
	// the start of the next month.
	ErrQuota = errors.New("monthly quota reached")
	// ErrRateLimited: the token sent more than its per-second allowance; retry shortly.
	ErrRateLimited = errors.New("rate limited")
	// ErrDisabled: the tenant is disabled and takes no appends.
	ErrDisabled = errors.New("tenant disabled")
	// ErrUnavailable: the broker, the store or the signer did not answer; retry with
	// backoff.
	ErrUnavailable = errors.New("log unavailable")
)

// wireReasons names each reason on the broker (header Svc-Status of a reply).
var wireReasons = map[error]string{
	ErrInvalid:     "invalid",
	ErrTooLarge:    "too-large",
	ErrQuota:       "quota",
	ErrRateLimited: "rate-limited",
	ErrDisabled:    "disabled",
	ErrUnavailable: "unavailable",
}

// StatusOK is header Svc-Status of a reply that carries a proof.
const StatusOK = "ok"

// Refusal is an append answered without a proof.
type Refusal struct {
	Reason     error  // one of ErrInvalid … ErrUnavailable
	Message    string // the text for the producer, as SPEC.md words it
	RetryAfter int    // seconds to wait before retrying; 0 when not said
}

// Refuse makes a Refusal for reason with a formatted message.
func Refuse(reason error, retryAfter int, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Message: fmt.Sprintf(format, args...), RetryAfter: retryAfter}
}

// Unavailable is a Refusal for ErrUnavailable whose message is SPEC.md's
// "log unavailable: <cause>".
func Unavailable(cause error) *Refusal {
	return &Refusal{Reason: ErrUnavailable, Message: "log unavailable: " + cause.Error()}
}

func (r *Refusal) Error() string { return r.Message }

// Unwrap exposes the reason and the receipt package's matching sentinel.
func (r *Refusal) Unwrap() []error {
	if r.Reason == ErrUnavailable {
		return []error{r.Reason, receipt.ErrLogUnavailable}
	}
	return []error{r.Reason, receipt.ErrLogRefused}
}

// Retryable reports whether SPEC.md's retry contract retries err: the log unavailable
// (a 5xx or a timeout) or a 429 (rate limit, quota).
func Retryable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRateLimited) || errors.Is(err, ErrQuota)
}

// AsRefusal returns err as a *Refusal: itself when it is one, else ErrUnavailable
// with err as the cause (what an Admitter's unexpected error is answered with).
func AsRefusal(err error) *Refusal {
	var r *Refusal
	if errors.As(err, &r) {
		return r
	}
	return Unavailable(err)
}
