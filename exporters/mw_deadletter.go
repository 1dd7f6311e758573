package exporters

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
			letter := DeadLetter{Handler: exporter, Tenant: tenant, ReceiptID: msg.UUID, Error: err.Error(),
				Attempts: max(attempts, 1), SourceSeq: msg.Metadata.Get(mdSeq), At: time.Now().UTC()}
			if perr := PublishDead(msg.Context(), js, letter, msg.Payload); perr != nil {
				return nil, fmt.Errorf("%w (and %s could not keep it: %v)", err, DeadStream, perr)
			}
			msg.Metadata.Set(mdDead, "1")
			log.printf("svc: %s export of receipt %s refused for good, kept in %s: %v", exporter, msg.UUID, DeadStream, err)
			return nil, nil
		}
	}
}

// PublishDead stores one dead letter: the receipt as it was, its facts in headers.
func PublishDead(ctx context.Context, js jetstream.JetStream, l DeadLetter, payload []byte) error {
	m := nats.NewMsg(DeadSubject(l.Handler, l.Tenant))
	m.Data = payload
	m.Header.Set(HeaderReceiptID, l.ReceiptID)
	m.Header.Set(HeaderHandler, l.Handler)
	m.Header.Set(HeaderError, truncate(l.Error, 2000))
	m.Header.Set(HeaderAttempts, strconv.Itoa(l.Attempts))
	m.Header.Set(HeaderSourceSeq, l.SourceSeq)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := js.PublishMsg(ctx, m, jetstream.WithExpectStream(DeadStream))
	return err
}

// truncate makes s fit a header: one line, at most n bytes.
func truncate(s string, n int) string {
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
