package consume

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// The dead-letter stream: messages a handler refused for good (a receipt a collector
// refused, a stream message a projection cannot decode), one message each, on
// svc.dead.<handler>.<tenant>, the message as it was with the handler, the error, the
// attempt count and the source sequence in headers. A letter leaves it only when
// `svc exports dead replay` delivered it.
const (
	DeadStream      = "SVC_DEAD"
	DeadPrefix      = "svc.dead."
	HeaderHandler   = "Svc-Handler"
	HeaderError     = "Svc-Error"
	HeaderAttempts  = "Svc-Attempts"
	HeaderSourceSeq = "Svc-Source-Seq"
	// HeaderReceiptID names the receipt a message carries: on SVC_RECEIPTS (package
	// exporters) and on the dead letter kept of it; a projection's letter has none.
	HeaderReceiptID = "Svc-Receipt-Id"
)

// DeadSubject is where handler's dead letters for tenant go.
func DeadSubject(handler, tenant string) string { return DeadPrefix + handler + "." + tenant }

// DeadStreamConfig is SVC_DEAD: file storage, kept 30 days.
func DeadStreamConfig(replicas int) jetstream.StreamConfig {
	sc := pipeline.RecordStream(DeadStream, DeadPrefix, "receipts a collector refused for good, with the handler, the error and the attempts", replicas)
	sc.MaxAge = 30 * 24 * time.Hour
	sc.MaxMsgSize = receipt.MaxBundleSize + 8192
	return sc
}

// EnsureDeadStream creates or updates SVC_DEAD.
func EnsureDeadStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	return pipeline.EnsureStream(ctx, js, DeadStreamConfig(replicas))
}

// DeadLetter is one message in SVC_DEAD.
type DeadLetter struct {
	Seq       uint64    `json:"seq"` // its sequence in SVC_DEAD: what `dead replay --id` names
	Handler   string    `json:"handler"`
	Tenant    string    `json:"tenant"`
	ReceiptID string    `json:"receiptId"`
	Error     string    `json:"error"`
	Attempts  int       `json:"attempts"`
	SourceSeq string    `json:"sourceSeq"` // its sequence in the stream it was read from
	At        time.Time `json:"at"`
	payload   []byte
}

// PublishDead stores one dead letter: the message as it was, its facts in headers.
func PublishDead(ctx context.Context, js jetstream.JetStream, l DeadLetter, payload []byte) error {
	m := nats.NewMsg(DeadSubject(l.Handler, l.Tenant))
	m.Data = payload
	m.Header.Set(HeaderReceiptID, l.ReceiptID)
	m.Header.Set(HeaderHandler, l.Handler)
	m.Header.Set(HeaderError, Truncate(l.Error, 2000))
	m.Header.Set(HeaderAttempts, strconv.Itoa(l.Attempts))
	m.Header.Set(HeaderSourceSeq, l.SourceSeq)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := js.PublishMsg(ctx, m, jetstream.WithExpectStream(DeadStream))
	return err
}

// Keep stores the letter of a message its handler refused for good with err. With
// replicas > 0 it first creates (or updates) SVC_DEAD with that many replicas, for a
// router that does not make the stream at start. It returns nil once the letter is
// kept, and otherwise err with why SVC_DEAD could not keep it: the caller then must
// not let the message go (nothing is dropped unseen).
func Keep(ctx context.Context, js jetstream.JetStream, l DeadLetter, payload []byte, replicas int, err error) error {
	var perr error
	if replicas > 0 {
		perr = EnsureDeadStream(ctx, js, replicas)
	}
	if perr == nil {
		perr = PublishDead(ctx, js, l, payload)
	}
	if perr != nil {
		return fmt.Errorf("%w (and %s could not keep it: %w)", err, DeadStream, perr)
	}
	return nil
}

// Truncate makes s fit a header: one line, at most n bytes.
func Truncate(s string, n int) string {
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ListDead reads every dead letter (of one handler when handler is not empty), in
// order.
func ListDead(ctx context.Context, js jetstream.JetStream, handler string) ([]DeadLetter, error) {
	stream, err := deadStream(ctx, js)
	if stream == nil {
		return nil, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []DeadLetter
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		l := letterOf(m)
		if handler == "" || l.Handler == handler {
			out = append(out, l)
		}
	}
	return out, nil
}

func letterOf(m *jetstream.RawStreamMsg) DeadLetter {
	h := m.Header
	attempts, _ := strconv.Atoi(h.Get(HeaderAttempts))
	parts := strings.SplitN(strings.TrimPrefix(m.Subject, DeadPrefix), ".", 2)
	l := DeadLetter{Seq: m.Sequence, Handler: h.Get(HeaderHandler), ReceiptID: h.Get(HeaderReceiptID), Error: h.Get(HeaderError),
		Attempts: attempts, SourceSeq: h.Get(HeaderSourceSeq), At: m.Time.UTC(), payload: m.Data}
	if len(parts) == 2 {
		l.Tenant = parts[1]
	}
	return l
}

// DeadCounts counts the letters in SVC_DEAD by subject (svc.dead.<handler>.<tenant>);
// nil when there is no SVC_DEAD yet.
func DeadCounts(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	st, err := deadStream(ctx, js)
	if st == nil {
		return nil, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(DeadPrefix+">"))
	if err != nil {
		return nil, err
	}
	return info.State.Subjects, nil
}

// deadStream is SVC_DEAD; nil and no error when there is none yet.
func deadStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, DeadStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return st, nil
}
