package exporters

import (
	"errors"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline/consume"
)

// mdDead marks a message the dead-letter middleware kept in SVC_DEAD.
const mdDead = "svc_dead"

// deadLetterMiddleware keeps a receipt its collector refused for good (an error
// wrapping ErrPermanent: a 4xx other than 408 and 429, or a body it cannot take) in
// SVC_DEAD, with the handler, the error and the attempt count, and then lets the
// message be acknowledged, so one bad receipt never blocks the rest. A transient
// failure passes through (the message is redelivered later). If SVC_DEAD cannot take
// the letter, the message is not acknowledged either: nothing is lost.
func deadLetterMiddleware(js jetstream.JetStream, exporter, tenant string, log *lineWriter, st *statusBoard) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				return out, nil
			}
			st.failed(exporter, err)
			if !errors.Is(err, ErrPermanent) {
				return nil, err
			}
			attempts, _ := strconv.Atoi(msg.Metadata.Get(mdDelivered))
			letter := consume.DeadLetter{Handler: exporter, Tenant: tenant, ReceiptID: msg.UUID, Error: err.Error(),
				Attempts: max(attempts, 1), SourceSeq: msg.Metadata.Get(mdSeq), At: time.Now().UTC()}
			if kerr := consume.Keep(msg.Context(), js, letter, msg.Payload, 0, err); kerr != nil {
				return nil, kerr
			}
			msg.Metadata.Set(mdDead, "1")
			log.printf("svc: %s export of receipt %s refused for good, kept in %s: %v", exporter, msg.UUID, consume.DeadStream, err)
			return nil, nil
		}
	}
}
