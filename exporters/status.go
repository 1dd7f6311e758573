package exporters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline/consume"
)

// StatusBucket is the key-value bucket where each exporter's consumers record their
// last error (key <exporter>.<tenant>), for `svc exports status`.
const StatusBucket = "SVC_EXPORTS"

// statusBoard records failures, at most once a second per exporter.
type statusBoard struct {
	js       jetstream.JetStream
	tenant   string
	replicas int
	mu       sync.Mutex
	kv       jetstream.KeyValue
	last     map[string]time.Time
}

func newStatusBoard(js jetstream.JetStream, tenant string, replicas int) *statusBoard {
	return &statusBoard{js: js, tenant: tenant, replicas: max(replicas, 1), last: map[string]time.Time{}}
}

type lastError struct {
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

func (b *statusBoard) failed(exporter string, err error) {
	if b == nil || err == nil {
		return
	}
	b.mu.Lock()
	if time.Since(b.last[exporter]) < time.Second {
		b.mu.Unlock()
		return
	}
	b.last[exporter] = time.Now()
	kv := b.kv
	b.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if kv == nil {
			var err error
			if kv, err = b.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: StatusBucket, Replicas: b.replicas, Description: "the last error of each exporter"}); err != nil {
				return
			}
			b.mu.Lock()
			b.kv = kv
			b.mu.Unlock()
		}
		data, _ := json.Marshal(lastError{Error: consume.Truncate(err.Error(), 2000), At: time.Now().UTC()})
		_, _ = kv.Put(ctx, exporter+"."+b.tenant, data)
	}()
}

// Status reads each named exporter's consumer for tenant, its last error and its dead
// letters.
func Status(ctx context.Context, js jetstream.JetStream, tenant string, exporters []string) ([]consume.Status, error) {
	dead, err := consume.DeadCounts(ctx, js)
	if err != nil {
		return nil, err
	}
	kv, kvErr := js.KeyValue(ctx, StatusBucket)
	var out []consume.Status
	for _, e := range exporters {
		s := consume.Status{Exporter: e, Tenant: tenant, DeadLetters: dead[consume.DeadSubject(e, tenant)]}
		cons, err := js.Consumer(ctx, ReceiptsStream, ConsumerName(e, tenant))
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			s.LastError = "no consumer yet: no process has exported this tenant's receipts to " + e
		case err != nil:
			return nil, fmt.Errorf("consumer %s: %w", ConsumerName(e, tenant), err)
		default:
			info, err := cons.Info(ctx)
			if err != nil {
				return nil, err
			}
			s.Position = info.AckFloor.Stream
			s.Backlog = info.NumPending + uint64(info.NumAckPending)
		}
		if kvErr == nil {
			if ent, err := kv.Get(ctx, e+"."+tenant); err == nil {
				var le lastError
				if json.Unmarshal(ent.Value(), &le) == nil {
					s.LastError, s.LastErrorAt = le.Error, le.At
				}
			}
		}
		out = append(out, s)
	}
	return out, nil
}
