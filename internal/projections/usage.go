package projections

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/pipeline"
)

// Metering counts each tenant's appends per calendar month (UTC, by the time the
// broker committed the batch) and its total leaves. It follows svc.leaves.> and is
// idempotent by stream sequence, so a replay rebuilds it exactly.
type Metering struct {
	StatePath string
	JS        jetstream.JetStream
	// Telemetry receives the projection's lag and broker retries; nil: none.
	Telemetry *telemetry.Telemetry

	mu sync.RWMutex
	st meteringState
}

type meteringState struct {
	StreamSeq uint64                       `json:"streamSeq"`
	Appends   map[string]map[string]uint64 `json:"appends"` // tenant → month → appends
	Leaves    map[string]uint64            `json:"leaves"`  // tenant → total leaves
}

// Load reads the saved state; call before Run and before serving.
func (m *Metering) Load() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st = meteringState{Appends: map[string]map[string]uint64{}, Leaves: map[string]uint64{}}
	if err := loadState(m.StatePath, &m.st); err != nil {
		return fmt.Errorf("metering %s: %w", m.StatePath, err)
	}
	if m.st.Appends == nil {
		m.st.Appends = map[string]map[string]uint64{}
	}
	if m.st.Leaves == nil {
		m.st.Leaves = map[string]uint64{}
	}
	return nil
}

// Run follows the stream until ctx ends, saving its state every second.
func (m *Metering) Run(ctx context.Context) error {
	m.mu.RLock()
	start := m.st.StreamSeq + 1
	m.mu.RUnlock()
	lastSave := time.Now()
	err := Follow(telemetry.WithConsumer(ctx, "metering"), m.Telemetry, m.JS, pipeline.LeavesPrefix+">", start, func(ev Event) error {
		m.Apply(ev)
		if time.Since(lastSave) > time.Second {
			lastSave = time.Now()
			return m.save()
		}
		return nil
	}, nil)
	if serr := m.save(); err == nil {
		err = serr
	}
	return err
}

// Apply counts one batch; a batch at or below the state's position is ignored.
func (m *Metering) Apply(ev Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ev.Seq <= m.st.StreamSeq {
		return
	}
	month := ev.Time.UTC().Format("2006-01")
	byMonth := m.st.Appends[ev.Tenant]
	if byMonth == nil {
		byMonth = map[string]uint64{}
		m.st.Appends[ev.Tenant] = byMonth
	}
	n := uint64(len(ev.Batch.Leaves))
	byMonth[month] += n
	m.st.Leaves[ev.Tenant] = max(m.st.Leaves[ev.Tenant], ev.Batch.First+n)
	m.st.StreamSeq = ev.Seq
}

func (m *Metering) save() error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return saveState(m.StatePath, m.st)
}

// Appends is a tenant's appends in month (YYYY-MM) and its total leaves.
func (m *Metering) Appends(tenant, month string) (appends, totalLeaves uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.Appends[tenant][month], m.st.Leaves[tenant]
}

// Position is the stream sequence the metering has applied.
func (m *Metering) Position() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.StreamSeq
}
