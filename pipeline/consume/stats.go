package consume

import "sync"

// Stats are a router's counts by handler name; T is what one handler counts (an
// exporter's deliveries, a projection's groups). The zero value is ready.
type Stats[T any] struct {
	mu sync.Mutex
	by map[string]*T
}

// Add changes name's counts with f, under the lock.
func (s *Stats[T]) Add(name string, f func(*T)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[string]*T{}
	}
	h := s.by[name]
	if h == nil {
		h = new(T)
		s.by[name] = h
	}
	f(h)
}

// Snapshot copies the counts by handler name.
func (s *Stats[T]) Snapshot() map[string]T {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]T{}
	for k, v := range s.by {
		out[k] = *v
	}
	return out
}
