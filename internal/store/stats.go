package store

import (
	"sync"
	"time"
)

// Stats counts what the projection handlers did, by handler name.
type Stats struct {
	mu sync.Mutex
	by map[string]*ProjectionStats
}

// ProjectionStats are one projection's counts since the process started.
type ProjectionStats struct {
	Position  uint64        // stream sequence of the last committed group
	Groups    uint64        // transactions committed
	Messages  uint64        // stream messages those groups covered
	Failed    uint64        // attempts that failed (each retry counts)
	LastError string        // the last failure, "" if none
	Busy      time.Duration // time spent in the handler
}

// Stats reports what the projection handlers of s did.
func (s *Store) Stats() map[string]ProjectionStats { return s.stats().snapshot() }

func (s *Store) stats() *Stats {
	s.statsOnce.Do(func() { s.st = &Stats{} })
	return s.st
}

func (st *Stats) snapshot() map[string]ProjectionStats {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := map[string]ProjectionStats{}
	for k, v := range st.by {
		out[k] = *v
	}
	return out
}

func (st *Stats) add(name string, f func(*ProjectionStats)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.by == nil {
		st.by = map[string]*ProjectionStats{}
	}
	p := st.by[name]
	if p == nil {
		p = &ProjectionStats{}
		st.by[name] = p
	}
	f(p)
}

func (st *Stats) failed(name string, err error) {
	st.add(name, func(p *ProjectionStats) { p.LastError = err.Error() })
}
