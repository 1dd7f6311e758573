package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline"
)

// Quota is the admitter of the tenants' sequencers (sequencer.Config.Admit): it
// refuses the appends of a disabled tenant and those past the plan's monthly
// allowance. The sequencer is the only writer of a tenant's log and calls it once per
// batch before committing, so the count it keeps is exact however many front ends
// take appends. On the first batch of a month (and after a restart) it counts the
// month's committed leaves from SVC_LEAVES (the last batch and the month's first).
type Quota struct {
	View *View
	JS   jetstream.JetStream
	Now  func() time.Time // default time.Now; tests inject a clock

	mu     sync.Mutex
	counts map[string]*monthCount
	seeds  map[string]*jetstream.RawStreamMsg // last batch a sequencer's recovery read (Seed); nil value: none
	leaves jetstream.Stream                   // SVC_LEAVES, looked up once
}

// Seed is the sequencer's Seeder: tenant's sequencer recovered with last as its log's
// last batch (nil: empty). The count kept from an earlier run is dropped (the tenant
// may have appended through another process since), and the next count starts from
// last instead of reading it again: a start's first append then costs one message
// read fewer, two fewer when the log's last batch is from an earlier month. The
// sequencer is the log's only writer and admits before it commits, so last is still
// the last batch when that count is made.
func (q *Quota) Seed(tenant string, last *jetstream.RawStreamMsg) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.seeds == nil {
		q.seeds = map[string]*jetstream.RawStreamMsg{}
	}
	delete(q.counts, tenant)
	if last != nil {
		kept := *last
		kept.Data = nil // the count reads only its time and headers; a batch's data is up to ~1 MiB, and a tenant only read keeps its seed
		last = &kept
	}
	q.seeds[tenant] = last
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
	c, err := q.count(ctx, tenant, month, now)
	if err != nil {
		return 0, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
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

// count is tenant's count for month, read from SVC_LEAVES when Quota holds none yet.
// The broker's round trips run without q.mu: after a restart every tenant's first
// batch counts its month, and one lock over them all made the tenants' starts wait
// for each other (a tenant's sequencer, its only caller, counts one at a time).
func (q *Quota) count(ctx context.Context, tenant, month string, now time.Time) (*monthCount, error) {
	q.mu.Lock()
	if q.counts == nil {
		q.counts = map[string]*monthCount{}
	}
	c, stream := q.counts[tenant], q.leaves
	last, seeded := q.seeds[tenant]
	delete(q.seeds, tenant)
	q.mu.Unlock()
	if c != nil && c.month == month {
		return c, nil
	}
	if stream == nil {
		var err error
		if stream, err = q.JS.Stream(ctx, pipeline.LeavesStream); err != nil {
			return nil, pipeline.Unavailable(fmt.Errorf("counting this month's appends: %w", err))
		}
	}
	var used uint64
	var err error
	if seeded {
		used, err = monthAppendsFrom(ctx, q.JS, tenant, now, last)
	} else {
		used, err = monthAppends(ctx, q.JS, stream, tenant, now)
	}
	if err != nil {
		return nil, pipeline.Unavailable(fmt.Errorf("counting this month's appends: %w", err))
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.leaves = stream
	if c := q.counts[tenant]; c != nil && c.month == month {
		return c, nil // counted meanwhile by another caller
	}
	c = &monthCount{month: month, n: used}
	q.counts[tenant] = c
	return c, nil
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
// month of now (UTC, by the time the broker stored each batch) to now. Batches are
// contiguous (each starts where the one before ended), so the count is where the log
// ends less where the month's first batch starts: two message reads, whatever the
// number of batches (a tenant's first append after a restart pays this).
func MonthAppends(ctx context.Context, js jetstream.JetStream, tenant string, now time.Time) (uint64, error) {
	stream, err := js.Stream(ctx, pipeline.LeavesStream)
	if err != nil {
		return 0, err
	}
	return monthAppends(ctx, js, stream, tenant, now)
}

// monthAppends is MonthAppends on SVC_LEAVES already looked up (stream).
func monthAppends(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, tenant string, now time.Time) (uint64, error) {
	last, err := stream.GetLastMsgForSubject(ctx, pipeline.LeavesSubject(tenant))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return monthAppendsFrom(ctx, js, tenant, now, last)
}

// monthAppendsFrom is monthAppends with the log's last batch already read (last; nil:
// the log is empty).
func monthAppendsFrom(ctx context.Context, js jetstream.JetStream, tenant string, now time.Time, last *jetstream.RawStreamMsg) (uint64, error) {
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	if last == nil || last.Time.Before(start) {
		return 0, nil
	}
	lastFirst, err := batchHeader(last.Header, pipeline.HeaderFirst, last.Sequence)
	if err != nil {
		return 0, err
	}
	lastCount, err := batchHeader(last.Header, pipeline.HeaderCount, last.Sequence)
	if err != nil {
		return 0, err
	}
	first, seq, err := firstBatchSince(ctx, js, pipeline.LeavesSubject(tenant), start)
	if err != nil {
		return 0, err
	}
	from, err := batchHeader(first, pipeline.HeaderFirst, seq)
	if err != nil {
		return 0, err
	}
	if from > lastFirst+lastCount {
		return 0, fmt.Errorf("batch at stream seq %d starts at %d, past the log's end %d", seq, from, lastFirst+lastCount)
	}
	return lastFirst + lastCount - from, nil
}

// batchHeader reads a batch's numeric header.
func batchHeader(h nats.Header, key string, seq uint64) (uint64, error) {
	n, err := strconv.ParseUint(h.Get(key), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("batch at stream seq %d lacks %s", seq, key)
	}
	return n, nil
}

// firstBatchSince reads the headers of the first message on subject stored at or
// after start: one request to the stream's message API (start_time with
// next_by_subj), where an ordered consumer cost a consumer's creation, reads and
// deletion.
func firstBatchSince(ctx context.Context, js jetstream.JetStream, subject string, start time.Time) (nats.Header, uint64, error) {
	req, _ := json.Marshal(struct {
		StartTime time.Time `json:"start_time"`
		NextFor   string    `json:"next_by_subj"`
	}{start, subject})
	prefix := js.Options().APIPrefix
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	}
	msg, err := js.Conn().RequestWithContext(ctx, prefix+"STREAM.MSG.GET."+pipeline.LeavesStream, req)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the month's first batch: %w", err)
	}
	var resp struct {
		Message *struct {
			Header []byte `json:"hdrs"`
			Seq    uint64 `json:"seq"`
		} `json:"message"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, 0, fmt.Errorf("reading the month's first batch: %w", err)
	}
	if resp.Error != nil || resp.Message == nil {
		return nil, 0, fmt.Errorf("reading the month's first batch of %s: %v", subject, resp.Error)
	}
	h, err := nats.DecodeHeadersMsg(resp.Message.Header)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the month's first batch: %w", err)
	}
	return h, resp.Message.Seq, nil
}
