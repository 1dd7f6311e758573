package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/client"
	"svc.dev/svc/receipt"
)

// Client sends append requests over NATS and waits for the sequencer's answer. One
// Client serves any number of goroutines over one reply subscription. With
// ClientConfig.Bundle it coalesces concurrent appends to one tenant into bundles.
type Client struct {
	nc       *nats.Conn
	timeout  time.Duration
	resend   time.Duration // without the broker's stored-acknowledgement by then, publish again; 0: never
	retries  int
	bundle   int
	inFlight int
	linger   time.Duration // at most this long a lone append waits for company
	header   func(context.Context, nats.Header)
	status   chan nats.Status // RECONNECTING: the answers awaited are lost
	prefix   string
	sub      *nats.Subscription
	next     atomic.Uint64

	mu      sync.Mutex
	waiting map[string]*flight // by reply inbox
	queues  map[string]*queue  // by tenant, with Bundle
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// Timeout is how long one attempt may take; default 10 s (SPEC.md: log.timeoutMs).
	// A timeout counts as unreachable and is retried like a server error.
	Timeout time.Duration
	// ResendAfter: every request asks JetStream to acknowledge that SVC_APPEND stored
	// it; one not acknowledged within ResendAfter (its node, or the stream's leader,
	// was lost with it) or refused for want of a stream leader is published again,
	// until Timeout, and a copy goes straight to the tenant's holder (DirectSubject),
	// at most once per ResendAfter. A request stored twice, or stored and sent
	// direct, is answered twice with the same index (the sequencer's idempotency).
	// Default 1 s; negative: never resend.
	ResendAfter time.Duration
	// Retries is how often a 429, a 5xx or a timeout is retried with backoff; SPEC.md
	// says three. Negative means none (the HTTP front, whose own client retries).
	Retries int
	// Bundle, when above 1, coalesces appends to one tenant into bundles of at most
	// that many leaves (and MaxBundleBytes): while BundleInFlight bundles of a tenant
	// await their answer, further appends wait and leave together in the next one, as
	// soon as an answer comes. An append that finds a free slot leaves at once, so
	// nothing waits when there is no concurrency. 0 or 1: every append is its own
	// request (what a sequencer older than bundles understands). At most
	// MaxBundleLeaves.
	Bundle int
	// BundleInFlight is how many bundles of one tenant may await their answer at once;
	// default 1: the sequencer takes one batch at a time, so a second bundle would only
	// wait in the broker, while the appends that arrive during a sequencer's cycle all
	// leave in the one bundle sent when its answer comes (measured: 1 beat 2, 4 and 8
	// in appends/s and CPU per append, docs/design/log-service.md). A lost answer holds
	// the slot until Timeout.
	BundleInFlight int
	// BundleLinger bounds how long an append that finds its tenant's slot free waits
	// for others to leave with it, when the tenant's last bundle showed concurrency
	// (it carried more than one leaf): it leaves once as many appends wait as that
	// bundle carried, or after the last bundle's round trip, at most BundleLinger.
	// Without it, under steady concurrency the first append to arrive after an
	// answer left alone and every other one waited a whole round trip behind it:
	// half the sequencer's batches carried one leaf (measured with Tessera's hammer,
	// docs/design/log-service.md). An append without concurrency never waits: after
	// a bundle of one leaf the next leaves at once. Default 2 ms; negative: never.
	BundleLinger time.Duration
	// Header, when set, adds headers to each request from its context (the log
	// service: the W3C trace context, internal/telemetry.InjectNATS). A bundle carries
	// the headers of its first append's context.
	Header func(ctx context.Context, h nats.Header)
}

// call is one append waiting for its answer.
type call struct {
	ctx  context.Context
	leaf Leaf
	done chan result // buffered: the answer never blocks on a caller that gave up
	gone atomic.Bool // the caller returned; not worth sending any more
}

type result struct {
	body []byte
	err  error
}

// DefaultBundleLinger is ClientConfig.BundleLinger's default.
const DefaultBundleLinger = 2 * time.Millisecond

// flight is one request (a single leaf or a bundle) awaiting its answer.
type flight struct {
	tenant string // set when it holds one of the tenant's in-flight slots
	calls  []*call
	sent   time.Time
	timer  *time.Timer
	msg    *nats.Msg   // the request, to publish again while not stored
	resend *time.Timer // armed until the broker acknowledged storing msg
	direct time.Time   // when its last direct copy was sent (DirectSubject)
}

// ackMark starts the last token of the subject a request's stored-acknowledgement
// comes back on: <prefix>a<n> for the request answered on <prefix><n>.
const ackMark = "a"

// queue is a tenant's appends waiting for a free slot.
type queue struct {
	pending  []*call
	inFlight int
	last     int           // leaves of the tenant's last bundle: the concurrency seen
	rtt      time.Duration // the last bundle's round trip
	linger   *time.Timer   // armed while a free slot waits for company (BundleLinger)
}

// NewClient subscribes to a private reply subject on nc.
func NewClient(nc *nats.Conn, cfg ClientConfig) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Retries == 0 {
		cfg.Retries = 3
	}
	if cfg.ResendAfter == 0 {
		cfg.ResendAfter = time.Second
	}
	if cfg.Retries < 0 {
		cfg.Retries = 0
	}
	if cfg.Bundle < 0 || cfg.Bundle > MaxBundleLeaves {
		return nil, fmt.Errorf("pipeline: Bundle %d outside 0..%d", cfg.Bundle, MaxBundleLeaves)
	}
	if cfg.BundleInFlight <= 0 {
		cfg.BundleInFlight = 1
	}
	if cfg.BundleLinger == 0 {
		cfg.BundleLinger = DefaultBundleLinger
	}
	c := &Client{nc: nc, timeout: cfg.Timeout, resend: max(cfg.ResendAfter, 0), retries: cfg.Retries, bundle: cfg.Bundle, inFlight: cfg.BundleInFlight,
		linger: max(cfg.BundleLinger, 0), header: cfg.Header,
		prefix: nats.NewInbox() + ".", waiting: map[string]*flight{}, queues: map[string]*queue{}}
	sub, err := nc.Subscribe(c.prefix+"*", func(m *nats.Msg) {
		if inbox, ok := strings.CutPrefix(m.Subject, c.prefix+ackMark); ok {
			c.stored(c.prefix+inbox, m)
			return
		}
		c.finish(m.Subject, m, nil)
	})
	if err != nil {
		return nil, err
	}
	sub.SetPendingLimits(-1, -1)
	c.sub = sub
	c.status = nc.StatusChanged(nats.RECONNECTING)
	go c.failOnDisconnect()
	return c, nil
}

// failOnDisconnect answers every append waiting for its reply when the connection to
// the broker drops: a reply the sequencer sent meanwhile is lost, so waiting for it
// would only hold the caller until Timeout. The caller retries; a leaf the sequencer
// did commit keeps its index.
func (c *Client) failOnDisconnect() {
	for range c.status {
		c.mu.Lock()
		inboxes := make([]string, 0, len(c.waiting))
		for inbox := range c.waiting {
			inboxes = append(inboxes, inbox)
		}
		c.mu.Unlock()
		for _, inbox := range inboxes {
			c.finish(inbox, nil, Refuse(ErrUnavailable, 1, "log unavailable: the connection to the broker dropped while the append waited for its answer; retry (a leaf already committed keeps its index)"))
		}
	}
}

// Close drops the reply subscription, stops publishing requests again and stops
// waiting for company.
func (c *Client) Close() error {
	c.nc.RemoveStatusListener(c.status)
	c.mu.Lock()
	for _, f := range c.waiting {
		if f.resend != nil {
			f.resend.Stop()
			f.resend = nil
		}
	}
	for _, q := range c.queues {
		if q.linger != nil {
			q.linger.Stop()
			q.linger = nil
		}
	}
	c.mu.Unlock()
	return c.sub.Unsubscribe()
}

// abandoned reports whether every caller of f has returned: its request is not worth
// publishing again.
func (f *flight) abandoned() bool {
	for _, cl := range f.calls {
		if !cl.gone.Load() {
			return false
		}
	}
	return true
}

// Do sends one append request and waits for its answer, at most Timeout: the proof,
// or a *Refusal (a timeout or a transport failure is one for ErrUnavailable).
func (c *Client) Do(ctx context.Context, tenant string, l Leaf) (*receipt.Proof, error) {
	body, err := c.DoRaw(ctx, tenant, l)
	if err != nil {
		return nil, err
	}
	var p receipt.Proof
	if err := json.Unmarshal(body, &p); err != nil || p.TreeHead == nil {
		return nil, Refuse(ErrUnavailable, 0, "log unavailable: malformed answer: %v", err)
	}
	return &p, nil
}

// DoRaw is Do returning the answer's JSON ({inclusion, treeHead}) undecoded, for the
// HTTP front, which passes it on as its own answer.
func (c *Client) DoRaw(ctx context.Context, tenant string, l Leaf) ([]byte, error) {
	cl := &call{ctx: ctx, leaf: l, done: make(chan result, 1)}
	defer cl.gone.Store(true)
	if c.bundle > 1 {
		c.enqueue(tenant, cl)
	} else {
		c.send(tenant, []*call{cl}, false)
	}
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, Unavailable(ctx.Err())
	case <-t.C:
		return nil, c.timedOut()
	case r := <-cl.done:
		return r.body, r.err
	}
}

func (c *Client) timedOut() error {
	return Refuse(ErrUnavailable, 0, "log unavailable: no answer within %s", c.timeout)
}

// enqueue queues cl behind its tenant's other appends and sends a bundle when a slot
// is free.
func (c *Client) enqueue(tenant string, cl *call) {
	c.mu.Lock()
	q := c.queues[tenant]
	if q == nil {
		q = &queue{}
		c.queues[tenant] = q
	}
	q.pending = append(q.pending, cl)
	calls := c.takeLocked(tenant, q, false)
	c.mu.Unlock()
	if calls != nil {
		c.send(tenant, calls, true)
	}
}

// takeLocked takes the next bundle of q when one of its slots is free, skipping
// appends whose callers gave up, and forgets an idle queue. With a free slot and
// fewer appends waiting than the last bundle carried, it arms q's linger instead
// (BundleLinger); force (the linger ran out) takes what waits.
func (c *Client) takeLocked(tenant string, q *queue, force bool) []*call {
	if q.inFlight >= c.inFlight {
		return nil
	}
	if !force && c.lingerLocked(tenant, q) {
		return nil
	}
	if q.linger != nil {
		q.linger.Stop()
		q.linger = nil
	}
	var calls []*call
	size, n := len(bundleMagic)+4, 0
	for ; n < len(q.pending) && len(calls) < c.bundle; n++ {
		cl := q.pending[n]
		if cl.gone.Load() {
			continue
		}
		_, b := leafKind(cl.leaf)
		if len(calls) > 0 && size+5+len(b) > MaxBundleBytes {
			break
		}
		size += 5 + len(b)
		calls = append(calls, cl)
	}
	q.pending = q.pending[n:]
	if len(q.pending) == 0 {
		q.pending = nil
	}
	switch {
	case calls != nil:
		q.inFlight++
		q.last = len(calls)
	case q.inFlight == 0 && q.last <= 1:
		delete(c.queues, tenant)
	}
	return calls
}

// lingerLocked says whether q's free slot should wait for company: the tenant's
// last bundle carried more leaves than wait now, and the linger has not run out. It
// arms the linger on the first call.
func (c *Client) lingerLocked(tenant string, q *queue) bool {
	if c.linger <= 0 || q.last <= 1 || len(q.pending) == 0 || len(q.pending) >= min(q.last, c.bundle) {
		return false
	}
	if q.linger == nil {
		d := min(max(q.rtt, 100*time.Microsecond), c.linger)
		q.linger = time.AfterFunc(d, func() { c.lingered(tenant, q) })
	}
	return true
}

// lingered sends what waits in q when its linger ran out.
func (c *Client) lingered(tenant string, q *queue) {
	c.mu.Lock()
	var calls []*call
	if c.queues[tenant] == q && q.linger != nil {
		q.linger = nil
		calls = c.takeLocked(tenant, q, true)
	}
	c.mu.Unlock()
	if calls != nil {
		c.send(tenant, calls, true)
	}
}

// send publishes calls as one request (a bundle when more than one) and arms its
// timeout; counted says it holds one of the tenant's slots.
func (c *Client) send(tenant string, calls []*call, counted bool) {
	inbox := c.prefix + strconv.FormatUint(c.next.Add(1), 10)
	var m *nats.Msg
	if len(calls) == 1 {
		m = NewRequest(tenant, calls[0].leaf, inbox)
	} else {
		leaves := make([]Leaf, len(calls))
		for i, cl := range calls {
			leaves[i] = cl.leaf
		}
		m = NewBundleRequest(tenant, leaves, inbox)
	}
	if c.header != nil {
		c.header(calls[0].ctx, m.Header)
	}
	f := &flight{calls: calls, msg: m, sent: time.Now()}
	if counted {
		f.tenant = tenant
	}
	if c.resend > 0 {
		m.Reply = c.prefix + ackMark + strings.TrimPrefix(inbox, c.prefix)
	}
	c.mu.Lock()
	c.waiting[inbox] = f
	f.timer = time.AfterFunc(c.timeout, func() { c.finish(inbox, nil, c.timedOut()) })
	if c.resend > 0 {
		f.resend = time.AfterFunc(c.resend, func() { c.publishAgain(inbox) })
	}
	c.mu.Unlock()
	if err := c.nc.PublishMsg(m); err != nil {
		c.finish(inbox, nil, Unavailable(err))
	}
}

// stored reads the broker's answer to the publication of inbox's request: a
// JetStream acknowledgement ends the resending; a refusal (no stream leader: "no
// responders", or an error acknowledgement) publishes it again after a short pause.
func (c *Client) stored(inbox string, m *nats.Msg) {
	var ack struct {
		Stream string          `json:"stream"`
		Error  json.RawMessage `json:"error"`
	}
	ok := m.Header.Get("Status") == "" && json.Unmarshal(m.Data, &ack) == nil && ack.Error == nil && ack.Stream != ""
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.waiting[inbox]
	if f == nil || f.resend == nil {
		return
	}
	if ok {
		f.resend.Stop()
		f.resend = nil // stored: a late refusal of an earlier copy re-arms nothing
		return
	}
	f.resend.Reset(min(c.resend, 100*time.Millisecond))
}

// publishAgain publishes inbox's request again when it is still waiting and was not
// acknowledged as stored, with a copy to the tenant's holder (DirectSubject), and
// arms the next try.
func (c *Client) publishAgain(inbox string) {
	c.mu.Lock()
	f := c.waiting[inbox]
	if f == nil || f.resend == nil || f.abandoned() {
		c.mu.Unlock()
		return
	}
	f.resend.Reset(c.resend)
	m := f.msg
	direct := time.Since(f.direct) >= c.resend // refusals resend sooner; copies stay one per ResendAfter
	if direct {
		f.direct = time.Now()
	}
	c.mu.Unlock()
	_ = c.nc.PublishMsg(m) // a failure is the connection's, which failOnDisconnect answers
	if direct {
		_ = c.nc.PublishMsg(&nats.Msg{Subject: DirectPrefix + strings.TrimPrefix(m.Subject, AppendPrefix), Header: m.Header, Data: m.Data})
	}
}

// finish answers the flight of inbox from m, or with fail when m is nil, and sends
// the tenant's next bundle in the slot it frees.
func (c *Client) finish(inbox string, m *nats.Msg, fail error) {
	c.mu.Lock()
	f, ok := c.waiting[inbox]
	delete(c.waiting, inbox)
	var next []*call
	if ok {
		f.timer.Stop()
		if f.resend != nil {
			f.resend.Stop()
		}
		if q := c.queues[f.tenant]; f.tenant != "" && q != nil {
			q.inFlight--
			q.rtt = time.Since(f.sent)
			next = c.takeLocked(f.tenant, q, false)
		}
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	if next != nil {
		c.send(f.tenant, next, true)
	}
	if m == nil {
		for _, cl := range f.calls {
			cl.done <- result{err: fail}
		}
		return
	}
	for i, r := range answers(m, len(f.calls)) {
		f.calls[i].done <- r
	}
}

// answers reads the reply to a request of n leaves: one result per leaf.
func answers(m *nats.Msg, n int) []result {
	out := make([]result, n)
	fill := func(r result) []result {
		for i := range out {
			out[i] = r
		}
		return out
	}
	st := m.Header.Get(HeaderStatus)
	switch {
	case st == StatusBundle:
		head, as, err := DecodeBundleReply(m.Data)
		if err != nil {
			return fill(result{err: Unavailable(err)})
		}
		if len(as) != n {
			return fill(result{err: Refuse(ErrUnavailable, 0, "log unavailable: %d answers to a bundle of %d", len(as), n)})
		}
		for i, a := range as {
			if a.Refusal != nil {
				out[i] = result{err: a.Refusal}
			} else {
				out[i] = result{body: ProofJSON(a.Inclusion, head)}
			}
		}
		return out
	case st == StatusOK && n == 1:
		return fill(result{body: m.Data})
	case st == StatusOK:
		return fill(result{err: Refuse(ErrUnavailable, 0, "log unavailable: one proof for a bundle of %d", n)})
	}
	r, err := DecodeReply(m)
	switch {
	case err != nil:
		return fill(result{err: Unavailable(err)})
	case r.Refusal == nil:
		return fill(result{err: Refuse(ErrUnavailable, 0, "log unavailable: an answer without a proof")})
	}
	return fill(result{err: r.Refusal}) // a refusal of the whole request
}

// Append is Do with SPEC.md's retry contract: a 429, a 5xx or a timeout is retried
// three times with exponential backoff and jitter, then the call fails. Other
// statuses fail at once.
func (c *Client) Append(ctx context.Context, tenant string, l Leaf) (*receipt.Proof, error) {
	var err error
	for attempt := 0; ; attempt++ {
		var p *receipt.Proof
		if p, err = c.Do(ctx, tenant, l); err == nil {
			return p, nil
		}
		var ref *Refusal
		if !errors.As(err, &ref) || !Retryable(ref) || attempt == c.retries || ctx.Err() != nil {
			return nil, err
		}
		if err := client.Sleep(ctx, client.Backoff(attempt, ref.RetryAfter)); err != nil {
			return nil, err
		}
	}
}

// Log is a receipt.Log that appends to a tenant's log over NATS: what gateways and
// sidecars in a fleet use instead of HTTP.
type Log struct {
	Client   *Client
	Tenant   string
	HashOnly bool // send only the leaf hash
}

// Append implements receipt.Log.
func (l *Log) Append(ctx context.Context, leaf []byte) (*receipt.Proof, error) {
	lf := NewLeaf(leaf)
	if l.HashOnly {
		lf.Data = nil
	}
	return l.Client.Append(ctx, l.Tenant, lf)
}
