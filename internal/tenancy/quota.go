package tenancy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline"
)

// Quota is the admitter of the tenants' sequencers (sequencer.Config.Admit): it
// refuses the appends of a disabled tenant and those past the plan's monthly
// allowance. The sequencer is the only writer of a tenant's log and calls it once per
// batch before committing, so the count it keeps is exact however many front ends
// take appends. On the first batch of a month (and after a restart) it counts the
// month's committed leaves from SVC_LEAVES (headers only: one message per batch).
type Quota struct {
	View *View
	JS   jetstream.JetStream
	Now  func() time.Time // default time.Now; tests inject a clock

	mu     sync.Mutex
	counts map[string]*monthCount
}

type monthCount struct {
	month string // YYYY-MM
	n     uint64
}

// Admit admits all n leaves or none.
func (q *Quota) Admit(ctx context.Context, tenant string, n int) error {
	k, err := q.AdmitUpTo(ctx, tenant, n)
	if k < n && err == nil {
		err = errors.New("quota: partial admission")
	}
	if k > 0 && k < n {
		q.mu.Lock()
		q.counts[tenant].n -= uint64(k) // nothing of the batch goes in
		q.mu.Unlock()
	}
	return err
}

// AdmitUpTo admits the first k of n leaves (k ≤ n) and counts them; when k < n the
// error is a *pipeline.Refusal for the rest: ErrDisabled (the tenant is disabled or
// unknown), or ErrQuota with Retry-After reaching the start of the next month (UTC).
func (q *Quota) AdmitUpTo(ctx context.Context, tenant string, n int) (int, error) {
	t, ok := q.View.Tenant(tenant)
	if !ok {
		return 0, pipeline.Refuse(pipeline.ErrDisabled, 0, "tenant %s is not known to this log", tenant)
	}
	if t.Disabled {
		return 0, pipeline.Refuse(pipeline.ErrDisabled, 0, "tenant %s is disabled; ask the operator to enable it", tenant)
	}
	now := time.Now()
	if q.Now != nil {
		now = q.Now()
	}
	now = now.UTC()
	month := now.Format("2006-01")
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.counts == nil {
		q.counts = map[string]*monthCount{}
	}
	c := q.counts[tenant]
	if c == nil || c.month != month {
		used, err := MonthAppends(ctx, q.JS, tenant, now)
		if err != nil {
			return 0, pipeline.Unavailable(fmt.Errorf("counting this month's appends: %w", err))
		}
		c = &monthCount{month: month, n: used}
		q.counts[tenant] = c
	}
	allow, limited := Allowance(t.Plan)
	k := uint64(n)
	if limited {
		k = min(k, allow-min(allow, c.n))
	}
	c.n += k
	if k == uint64(n) {
		return n, nil
	}
	next := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	retry := int((next.Sub(now) + time.Second - 1) / time.Second)
	return int(k), pipeline.Refuse(pipeline.ErrQuota, retry,
		"monthly quota reached: tenant %s used all %d appends of plan %s in %s; retry after %s or move to a larger plan",
		tenant, allow, t.Plan, month, next.Format(time.RFC3339))
}

// Used is the count Quota holds for a tenant's current month (0 before its first
// batch of the month).
func (q *Quota) Used(tenant string) (month string, n uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if c := q.counts[tenant]; c != nil {
		return c.month, c.n
	}
	return "", 0
}

// MonthAppends counts the leaves committed to tenant's log from the start of the
// month of now (UTC, by the time the broker stored each batch) to now.
func MonthAppends(ctx context.Context, js jetstream.JetStream, tenant string, now time.Time) (uint64, error) {
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	stream, last, err := pipeline.TenantLeaves(ctx, js, tenant)
	if err != nil || last == nil {
		return 0, err
	}
	subject := pipeline.LeavesSubject(tenant)
	if last.Time.Before(start) {
		return 0, nil
	}
	it, done, err := pipeline.ReadFrom(ctx, stream, subject, pipeline.From{Time: &start, HeadersOnly: true})
	if err != nil {
		return 0, err
	}
	defer done()
	var total uint64
	for {
		m, err := it.Next()
		if err != nil {
			return 0, err
		}
		md, err := m.Metadata()
		if err != nil {
			return 0, err
		}
		cnt, err := strconv.ParseUint(m.Headers().Get(pipeline.HeaderCount), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("batch at stream seq %d lacks %s", md.Sequence.Stream, pipeline.HeaderCount)
		}
		total += cnt
		if md.Sequence.Stream >= last.Sequence {
			return total, nil
		}
	}
}
