package exporters

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// The dead-letter stream: receipts a collector refused for good, one message each,
// on svc.dead.<exporter>.<tenant>, the bundle as it was in SVC_RECEIPTS with the
// handler, the error, the attempt count and the source sequence in headers. A letter
// leaves it only when `svc exports dead replay` delivered it.
const (
	DeadStream      = "SVC_DEAD"
	DeadPrefix      = "svc.dead."
	HeaderHandler   = "Svc-Handler"
	HeaderError     = "Svc-Error"
	HeaderAttempts  = "Svc-Attempts"
	HeaderSourceSeq = "Svc-Source-Seq"
)

// DeadSubject is where exporter's dead letters for tenant go.
func DeadSubject(exporter, tenant string) string { return DeadPrefix + exporter + "." + tenant }

// DeadStreamConfig is SVC_DEAD: file storage, kept 30 days.
func DeadStreamConfig(replicas int) jetstream.StreamConfig {
	if replicas <= 0 {
		replicas = 1
	}
	return jetstream.StreamConfig{
		Name:        DeadStream,
		Description: "receipts a collector refused for good, with the handler, the error and the attempts",
		Subjects:    []string{DeadPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		MaxAge:      30 * 24 * time.Hour,
		MaxMsgSize:  receipt.MaxBundleSize + 8192,
	}
}

// EnsureDeadStream creates or updates SVC_DEAD.
func EnsureDeadStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	return pipeline.EnsureStream(ctx, js, DeadStreamConfig(replicas))
}

// DeadLetter is one receipt in SVC_DEAD.
type DeadLetter struct {
	Seq       uint64    `json:"seq"` // its sequence in SVC_DEAD: what `dead replay --id` names
	Handler   string    `json:"handler"`
	Tenant    string    `json:"tenant"`
	ReceiptID string    `json:"receiptId"`
	Error     string    `json:"error"`
	Attempts  int       `json:"attempts"`
	SourceSeq string    `json:"sourceSeq"` // its sequence in SVC_RECEIPTS
	At        time.Time `json:"at"`
	bundle    []byte
}

// ListDead reads every dead letter (of one exporter when exporter is not empty), in
// order.
func ListDead(ctx context.Context, js jetstream.JetStream, exporter string) ([]DeadLetter, error) {
	stream, err := js.Stream(ctx, DeadStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
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
		if exporter == "" || l.Handler == exporter {
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
		Attempts: attempts, SourceSeq: h.Get(HeaderSourceSeq), At: m.Time.UTC(), bundle: m.Data}
	if len(parts) == 2 {
		l.Tenant = parts[1]
	}
	return l
}

// DeadHandler takes back the dead letters of a handler that is not an exporter (the
// database projections, internal/store): ReplayLetter applies the letter's payload
// (the message as it was) or returns why not; the letter leaves SVC_DEAD only after
// it returned nil, so it must be safe to call twice for one letter.
type DeadHandler interface {
	Handler() string
	ReplayLetter(ctx context.Context, l DeadLetter, payload []byte) error
}

// ReplayDead delivers dead letters again, each to the exporter that refused it
// (found by name in exps) or to the DeadHandler of that name in others, and removes
// a letter from SVC_DEAD once it was taken. ids selects letters by their Seq; none
// means all. It returns how many were delivered; a letter refused again stays, and
// its error is reported.
func ReplayDead(ctx context.Context, js jetstream.JetStream, exps []Exporter, ids []uint64, progress func(done, total int), others ...DeadHandler) (int, error) {
	letters, err := ListDead(ctx, js, "")
	if err != nil {
		return 0, err
	}
	want := map[uint64]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var todo []DeadLetter
	for _, l := range letters {
		if len(ids) == 0 || want[l.Seq] {
			todo = append(todo, l)
			delete(want, l.Seq)
		}
	}
	for id := range want {
		return 0, fmt.Errorf("no dead letter %d in %s (svc exports dead list shows them)", id, DeadStream)
	}
	stream, err := js.Stream(ctx, DeadStream)
	if err != nil && len(todo) > 0 {
		return 0, err
	}
	byName := map[string]func(context.Context, DeadLetter) error{}
	for _, e := range exps {
		byName[e.Name()] = func(ctx context.Context, l DeadLetter) error { return sendBundle(ctx, e, l.bundle) }
	}
	for _, h := range others {
		byName[h.Handler()] = func(ctx context.Context, l DeadLetter) error { return h.ReplayLetter(ctx, l, l.bundle) }
	}
	var errs []error
	done := 0
	for i, l := range todo {
		if progress != nil {
			progress(i, len(todo))
		}
		send := byName[l.Handler]
		if send == nil {
			errs = append(errs, fmt.Errorf("letter %d: no %s handler is configured (a projection's letters need --db-env)", l.Seq, l.Handler))
			continue
		}
		if err := send(ctx, l); err != nil {
			errs = append(errs, fmt.Errorf("letter %d (receipt %s): %w", l.Seq, l.ReceiptID, err))
			continue
		}
		if err := stream.DeleteMsg(ctx, l.Seq); err != nil {
			errs = append(errs, fmt.Errorf("letter %d delivered but not removed: %w", l.Seq, err))
		}
		done++
	}
	if progress != nil {
		progress(len(todo), len(todo))
	}
	return done, errors.Join(errs...)
}

// sendBundle delivers one stored bundle to e.
func sendBundle(ctx context.Context, e Exporter, data []byte) error {
	r, err := decodeRecord(data)
	if err != nil {
		return err
	}
	return e.Send(ctx, []*Record{r})
}
