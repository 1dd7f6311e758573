package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/client"
	"svc.dev/svc/pipeline"
)

// PublishAdmin records an administrative event on the tenant's admin subject,
// filling in its id and time when unset.
func PublishAdmin(ctx context.Context, js jetstream.JetStream, e *client.AuditEntry) error {
	m, err := pipeline.AdminMsg(e, e, time.Now())
	if err != nil {
		return err
	}
	_, err = js.PublishMsg(ctx, m)
	return err
}

// Audit is the audit trail: every administrative event, per tenant, rebuilt from
// SVC_ADMIN when the process starts (the trail is small: one event per change).
type Audit struct {
	JS jetstream.JetStream

	mu     sync.RWMutex
	events map[string][]client.AuditEntry // tenant → events in order
}

// Load reads the whole admin stream.
func (a *Audit) Load(ctx context.Context) error {
	a.mu.Lock()
	a.events = map[string][]client.AuditEntry{}
	a.mu.Unlock()
	stream, err := a.JS.Stream(ctx, pipeline.AdminStream)
	if err != nil {
		return err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{pipeline.AdminPrefix + ">"}})
	if err != nil {
		return err
	}
	for read := uint64(0); read < info.State.Msgs; {
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var e client.AuditEntry
			if err := json.Unmarshal(m.Data(), &e); err != nil {
				return fmt.Errorf("audit: admin event %s: %w", m.Subject(), err)
			}
			a.add(e)
		}
		if n == 0 {
			// A broker that stops answering mid-read (an election) is retried by the
			// caller like any other timeout (pipeline.Transient).
			return fmt.Errorf("audit: the admin stream stopped answering: %w", nats.ErrTimeout)
		}
		read += uint64(n)
	}
	return nil
}

func (a *Audit) add(e client.AuditEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events[e.TenantID] = append(a.events[e.TenantID], e)
}

// Record publishes e and adds it to the trail.
func (a *Audit) Record(ctx context.Context, e client.AuditEntry) error {
	if err := PublishAdmin(ctx, a.JS, &e); err != nil {
		return err
	}
	a.add(e)
	return nil
}

// Entries returns a tenant's newest entries first, at most limit.
func (a *Audit) Entries(tenant string, limit int) []client.AuditEntry {
	a.mu.RLock()
	defer a.mu.RUnlock()
	ev := slices.Clone(a.events[tenant])
	slices.Reverse(ev)
	if len(ev) > limit {
		ev = ev[:limit]
	}
	return ev
}

// Tokens returns the token hash prefixes a tenant's trail says are live.
func (a *Audit) Tokens(tenant string) (known bool, live []string) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	set := map[string]bool{}
	for _, e := range a.events[tenant] {
		switch e.Action {
		case "tenant.add":
			known = true
		case "token.add":
			set[tokenOf(e.Detail)] = true
		case "token.revoke":
			delete(set, tokenOf(e.Detail))
		}
	}
	for t := range set {
		live = append(live, t)
	}
	slices.Sort(live)
	return known, live
}

// tokenOf reads the hash prefix from a token event's detail ("token <prefix>...").
func tokenOf(detail string) string {
	f := strings.Fields(detail)
	if len(f) >= 2 && f[0] == "token" {
		return f[1]
	}
	return ""
}
