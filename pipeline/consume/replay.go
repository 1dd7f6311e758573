package consume

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// DeadHandler takes back the dead letters of one handler name (an exporter, a
// database projection): ReplayLetter applies the letter's payload (the message as it
// was) or returns why not; the letter leaves SVC_DEAD only after it returned nil, so
// it must be safe to call twice for one letter.
type DeadHandler interface {
	Handler() string
	ReplayLetter(ctx context.Context, l DeadLetter, payload []byte) error
}

// ReplayDead delivers dead letters again, each to the handler of its name, and
// removes a letter from SVC_DEAD once it was taken. ids selects letters by their Seq;
// none means all. progress, when set, hears the count done and the total. It returns
// how many were delivered; a letter refused again stays, and its error is reported.
func ReplayDead(ctx context.Context, js jetstream.JetStream, ids []uint64, progress func(done, total int), handlers ...DeadHandler) (int, error) {
	todo, err := selectLetters(ctx, js, ids)
	if err != nil {
		return 0, err
	}
	stream, err := js.Stream(ctx, DeadStream)
	if err != nil && len(todo) > 0 {
		return 0, err
	}
	byName := map[string]DeadHandler{}
	for _, h := range handlers {
		byName[h.Handler()] = h
	}
	var errs []error
	done := 0
	for i, l := range todo {
		if progress != nil {
			progress(i, len(todo))
		}
		h := byName[l.Handler]
		if h == nil {
			errs = append(errs, fmt.Errorf("letter %d: no %s handler is configured (a projection's letters need --db-env)", l.Seq, l.Handler))
			continue
		}
		if err := h.ReplayLetter(ctx, l, l.payload); err != nil {
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

// selectLetters lists the letters ids names (all when none), or says which id has no
// letter.
func selectLetters(ctx context.Context, js jetstream.JetStream, ids []uint64) ([]DeadLetter, error) {
	letters, err := ListDead(ctx, js, "")
	if err != nil {
		return nil, err
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
		return nil, fmt.Errorf("no dead letter %d in %s (svc exports dead list shows them)", id, DeadStream)
	}
	return todo, nil
}
