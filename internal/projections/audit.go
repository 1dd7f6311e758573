package projections

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// AdminEvent is an administrative action: the audit trail is their projection. It
// never contains a token (Detail names a token by the 12-hex prefix of its hash).
type AdminEvent struct {
	ID       string `json:"id"`
	At       string `json:"at"`
	Actor    string `json:"actor"`
	Action   string `json:"action"` // tenant.add, tenant.disable, token.add, token.revoke, plan.set
	TenantID string `json:"tenantId"`
	Detail   string `json:"detail"`
}

// PublishAdmin records an administrative event on the tenant's admin subject,
// filling in its id and time when unset.
func PublishAdmin(ctx context.Context, js jetstream.JetStream, e *AdminEvent) error {
	if e.ID == "" {
		var b [12]byte
		rand.Read(b[:])
		e.ID = hex.EncodeToString(b[:])
	}
	if e.At == "" {
		e.At = receipt.FormatTime(time.Now())
	}
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	m := nats.NewMsg(pipeline.AdminSubject(e.TenantID))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, e.ID)
	_, err = js.PublishMsg(ctx, m)
	return err
}

// Audit is the audit trail: every administrative event, per tenant, rebuilt from
// SVC_ADMIN when the process starts (the trail is small: one event per change).
type Audit struct {
	JS jetstream.JetStream

	mu     sync.RWMutex
	events map[string][]AdminEvent // tenant → events in order
}

// Load reads the whole admin stream.
func (a *Audit) Load(ctx context.Context) error {
	a.mu.Lock()
	a.events = map[string][]AdminEvent{}
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
			var e AdminEvent
			if err := json.Unmarshal(m.Data(), &e); err != nil {
				return fmt.Errorf("audit: admin event %s: %w", m.Subject(), err)
			}
			a.add(e)
		}
		if n == 0 {
			return errors.New("audit: the admin stream stopped answering")
		}
		read += uint64(n)
	}
	return nil
}

func (a *Audit) add(e AdminEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events[e.TenantID] = append(a.events[e.TenantID], e)
}

// Record publishes e and adds it to the trail.
func (a *Audit) Record(ctx context.Context, e AdminEvent) error {
	if err := PublishAdmin(ctx, a.JS, &e); err != nil {
		return err
	}
	a.add(e)
	return nil
}

// Entries returns a tenant's newest entries first, at most limit.
func (a *Audit) Entries(tenant string, limit int) []AdminEvent {
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
