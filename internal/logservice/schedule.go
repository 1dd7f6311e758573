package logservice

import (
	"context"
	"sync"
	"time"
)

// schedule runs the turns of many held tenants' periodic work (their checkpoints,
// their lease renewals) from one loop per process instead of a goroutine per
// tenant: the loop wakes at the earliest item's next turn, marks the items due
// (within slack) busy and hands each to a turn function, which does the work (from a
// short-lived goroutine of its own) and ends with after. An item whose context ended
// leaves the schedule once no turn of it is in flight, and its finish is called.
type schedule[T any] struct {
	slack time.Duration
	mu    sync.Mutex
	items map[*scheduled[T]]bool
	kick  chan struct{}
}

// scheduled is one item of a schedule.
type scheduled[T any] struct {
	v      T
	ctx    context.Context // its end makes the item leave
	finish func()          // called once, when the item left
	next   time.Time       // when its next turn is due (under schedule.mu)
	busy   bool            // a turn is in flight
	gone   bool            // ctx ended
}

func newSchedule[T any](slack time.Duration) *schedule[T] {
	return &schedule[T]{slack: slack, items: map[*scheduled[T]]bool{}, kick: make(chan struct{}, 1)}
}

// add schedules v, its first turn at once, until ctx ends; then, once no turn of it
// is in flight, finish is called.
func (s *schedule[T]) add(ctx context.Context, v T, finish func()) {
	it := &scheduled[T]{v: v, ctx: ctx, finish: finish, next: time.Now()}
	s.mu.Lock()
	s.items[it] = true
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		it.gone = true
		leave := !it.busy && s.items[it]
		if leave {
			delete(s.items, it)
		}
		s.mu.Unlock()
		if leave {
			it.finish()
		}
	})
	s.wake()
}

func (s *schedule[T]) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run hands the due items to turn until ctx ends.
func (s *schedule[T]) run(ctx context.Context, turn func(*scheduled[T])) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-t.C:
		}
		for _, it := range s.due(time.Now()) {
			turn(it)
		}
		t.Reset(s.wait(time.Now()))
	}
}

// due marks busy and returns the items whose turn is due by now + slack.
func (s *schedule[T]) due(now time.Time) []*scheduled[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*scheduled[T]
	for it := range s.items {
		if !it.busy && !it.gone && !now.Add(s.slack).Before(it.next) {
			it.busy = true
			out = append(out, it)
		}
	}
	return out
}

// wait is how long until the earliest turn not in flight (a minute when none: add
// and after wake the loop).
func (s *schedule[T]) wait(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := time.Minute
	for it := range s.items {
		if !it.busy && !it.gone {
			d = min(d, it.next.Sub(now))
		}
	}
	return max(d, 0)
}

// after ends a turn of it, its next turn due at next. With end, or once its context
// ended, it leaves the schedule instead and its finish is called.
func (s *schedule[T]) after(it *scheduled[T], next time.Time, end bool) {
	s.mu.Lock()
	it.busy, it.next = false, next
	leave := (end || it.gone) && s.items[it]
	if leave {
		delete(s.items, it)
	}
	s.mu.Unlock()
	if leave {
		it.finish()
		return
	}
	s.wake()
}
