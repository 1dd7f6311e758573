package telemetry_test

import (
	"errors"
	"testing"

	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/pipeline"
)

// TestReasonOf: each refusal the sequencer answers with becomes its reason label,
// through the refusal wrapper as the HTTP front sees it.
func TestReasonOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{pipeline.Refuse(pipeline.ErrQuota, 3600, "monthly quota of 10000 appends reached"), telemetry.ReasonQuota},
		{pipeline.Refuse(pipeline.ErrRateLimited, 1, "slow down"), telemetry.ReasonRateLimited},
		{pipeline.Refuse(pipeline.ErrDisabled, 0, "tenant disabled"), telemetry.ReasonDisabled},
		{pipeline.Refuse(pipeline.ErrInvalid, 0, "bad"), telemetry.ReasonInvalid},
		{pipeline.Refuse(pipeline.ErrTooLarge, 0, "big"), telemetry.ReasonTooLarge},
		{pipeline.Unavailable(errors.New("no responders")), telemetry.ReasonUnavailable},
		{errors.New("anything else"), telemetry.ReasonUnavailable},
	} {
		if got := telemetry.ReasonOf(pipeline.AsRefusal(c.err)); got != c.want {
			t.Errorf("ReasonOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
