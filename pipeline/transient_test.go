package pipeline

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTransient: a cluster electing or without quorum is waited for; a refused
// configuration or a server without JetStream is not (the process says so and stops).
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{fmt.Errorf("stream SVC_APPEND: %w", &jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}), true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"}, true},
		{&jetstream.APIError{Code: 500, ErrorCode: 10118, Description: "stream is offline"}, true},
		{fmt.Errorf("lease bucket: %w", context.DeadlineExceeded), true},
		{nats.ErrTimeout, true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrNoStreamResponse, true},
		{jetstream.ErrJetStreamNotEnabled, false},
		{&jetstream.APIError{Code: 503, ErrorCode: 10039, Description: "jetstream not enabled for account"}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}, false},
		{nats.ErrAuthorization, false},
		{errors.New("disk full"), false},
		{nil, false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
