package sequencer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// consumerInactive is how long the broker keeps a tenant's SVC_APPEND consumer that
// nobody pulls from (its sequencer's process died without deleting it).
const consumerInactive = 10 * time.Minute

// preloadLeaves is how many of the latest leaf hashes a restart reads back for
// idempotency.
const preloadLeaves = 1 << 16

// ErrFenced: another sequencer committed to this tenant's log, so this one stopped
// without assigning any index. Run returns it; the process should not restart the
// sequencer blindly.
var ErrFenced = errors.New("sequencer: fenced out: another sequencer committed to this tenant's log")

// ErrShorterLog: the log of record (SVC_LEAVES) holds fewer of the tenant's leaves
// than this sequencer's tree, which were committed and acknowledged: the broker lost
// acknowledged writes (a node restarted with a truncated or corrupted store). Run
// returns it and the sequencer appends nothing more; another sequencer must not take
// the tenant over either (it would hand out the lost indices again), so the process
// keeps the tenant's lease and raises the alarm.
var ErrShorterLog = errors.New("sequencer: the log of record is shorter than this sequencer's tree: acknowledged leaves were lost by the broker")

// Admitter decides whether a tenant may append n more leaves: the place for monthly
// quotas and disabled tenants. A nil error admits; a *pipeline.Refusal (ErrQuota,
// ErrDisabled, ...) is answered as is, and any other error as ErrUnavailable. Admit is
// called once per batch with the number of leaves the batch would add, before the
// commit; it must not block for long (the batch waits).
type Admitter interface {
	Admit(ctx context.Context, tenant string, n int) error
}

// PartialAdmitter is an Admitter that can admit part of a batch: AdmitUpTo returns
// how many of the n leaves (the first k, 0 ≤ k ≤ n) may go in, and when k < n the
// refusal for the others. A monthly quota uses it so that the last allowed append of
// the month goes in even when it shares a batch with the first refused one.
type PartialAdmitter interface {
	Admitter
	AdmitUpTo(ctx context.Context, tenant string, n int) (int, error)
}

// Seeder is an Admitter told, at each recovery, the tenant's last committed batch
// the recovery read (nil: the log holds none): what it counts from the log of record
// starts there, without reading that batch again on the first batch after a start,
// and a count it kept from an earlier run (another process may have appended since)
// is dropped.
type Seeder interface {
	Admitter
	Seed(tenant string, last *jetstream.RawStreamMsg)
}

// admit asks a, partially when it can; it returns how many leaves are admitted and,
// when fewer than n, why not.
func admit(ctx context.Context, a Admitter, tenant string, n int) (int, error) {
	if pa, ok := a.(PartialAdmitter); ok {
		k, err := pa.AdmitUpTo(ctx, tenant, n)
		k = max(0, min(k, n))
		if k < n && err == nil {
			err = pipeline.Unavailable(errors.New("admitter refused without a reason"))
		}
		return k, err
	}
	if err := a.Admit(ctx, tenant, n); err != nil {
		return 0, err
	}
	return n, nil
}

// Config configures a Sequencer.
type Config struct {
	Tenant string                 // required; a valid pipeline tenant id
	LogID  string                 // named in signed heads when set
	Conn   *nats.Conn             // required
	Dir    string                 // the tree store; required (one per tenant)
	Signer receipt.EnvelopeSigner // signs one head per batch; required
	// MaxBatch caps the leaves of one batch; 1 ≤ MaxBatch ≤ 65536, default 4096.
	MaxBatch int
	// RecentLeaves is how many of the latest leaf hashes are remembered for
	// idempotent retries; default 1<<20. Memory grows with the log, about 40 bytes a
	// leaf up to this window (40 MiB at 2^20 leaves): a small tenant costs kilobytes.
	RecentLeaves int
	// CheckpointEvery is how often the tree store is synced and the stream position
	// recorded, bounding the replay after a crash; default 30 s (a sync stalls the
	// sequencer for a few milliseconds, and replay runs at hundreds of thousands of
	// leaves a second).
	CheckpointEvery time.Duration
	Admit           Admitter // optional
	// Telemetry observes each batch (size, latency, the commit span); nil: none.
	Telemetry *telemetry.Telemetry
	// Hold, when set, is called before every commit attempt and returns once the
	// sequencer may commit (nil) or when ctx ends: the hosted log holds commits
	// while it cannot renew the tenant's lease, and lets them go on the moment it
	// renews it again, with nothing else lost.
	Hold func(ctx context.Context) error
	// Adopt lists leaves the log must begin with: a log file that existed before
	// the stream (svc log --file on a gateway's log). After recovery the sequencer
	// checks that the leaves the log already holds match, and commits the rest
	// before it takes requests. A mismatch stops Run with an error.
	Adopt []pipeline.Leaf
	// Requests, when set, is where the sequencer takes its append requests: the
	// hosted log's one consumer per process on SVC_APPEND hands each tenant's
	// requests to its sequencer (internal/logservice). The sequencer then creates no
	// consumer of its own, acknowledges each request only after its batch is
	// committed, and leaves the ones it did not take up when it stops to the owner of
	// the channel. Nil: the sequencer runs its own durable consumer ConsumerName.
	Requests <-chan jetstream.Msg
	// Leaves, when set, is SVC_LEAVES already looked up (its stream info read) by the
	// caller: a process starting thousands of tenants' sequencers asks once instead
	// of once per start. Nil: Run looks it up.
	Leaves jetstream.Stream
	Logger *slog.Logger
	Now    func() time.Time
}

// Sequencer is the single writer of one tenant's log. Construct with New, then Run.
type Sequencer struct {
	cfg     Config
	js      jetstream.JetStream
	stream  jetstream.Stream
	store   merkle.HashStore
	tree    *merkle.Tree
	recent  *recent
	subject string
	log     *slog.Logger

	lastSeq   uint64    // stream sequence of the last committed batch; owned by Run
	lastStamp time.Time // timestamp of the last head signed; owned by Run
	lastCkpt  time.Time
	statePath string
	synced    *state // what the state file records, once known to hold the store synced to it

	ready    chan struct{} // closed once Run consumes requests
	readyOne sync.Once     // Run may be called again after a broker failure
	replayed uint64        // leaves replayed from the stream by the last recovery
	active   atomic.Int64  // unix nanoseconds of the last batch taken up (or of Run's start)
	busy     atomic.Bool   // a batch is being processed

	beforeAck func() error // tests: a crash between the answers and the acks
}

// New opens the tree store and checks cfg. It does not touch the broker.
func New(cfg Config) (*Sequencer, error) {
	switch {
	case !client.ValidTenant(cfg.Tenant):
		return nil, fmt.Errorf("sequencer: tenant %q is not a valid id", cfg.Tenant)
	case cfg.Conn == nil:
		return nil, errors.New("sequencer: no NATS connection")
	case cfg.Dir == "":
		return nil, errors.New("sequencer: no tree directory")
	case cfg.Signer == nil:
		return nil, errors.New("sequencer: no head signer")
	case cfg.MaxBatch < 0 || cfg.MaxBatch > 65536:
		return nil, fmt.Errorf("sequencer: MaxBatch %d outside 1..65536", cfg.MaxBatch)
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 4096
	}
	if cfg.RecentLeaves <= 0 {
		cfg.RecentLeaves = 1 << 20
	}
	if cfg.CheckpointEvery <= 0 {
		cfg.CheckpointEvery = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, err
	}
	store, err := merkle.OpenFileStore(filepath.Join(cfg.Dir, "tree"))
	if err != nil {
		return nil, fmt.Errorf("sequencer %s: %w", cfg.Tenant, err)
	}
	tree, err := merkle.NewTree(store)
	if err != nil {
		store.Close()
		return nil, err
	}
	return &Sequencer{
		cfg: cfg, js: js, store: store, tree: tree, recent: newRecent(cfg.RecentLeaves),
		subject: pipeline.LeavesSubject(cfg.Tenant), statePath: filepath.Join(cfg.Dir, "state.json"),
		log: cfg.Logger.With("tenant", cfg.Tenant), ready: make(chan struct{}),
	}, nil
}

// Replayed is how many leaves the last recovery replayed from the stream into the
// tree store: the work a restart did, which depends on what the store missed, not on
// the size of the log.
func (s *Sequencer) Replayed() uint64 { return s.replayed }

// LastActive is when the sequencer last took up a batch of requests (or started),
// now while it processes one: the service stops a sequencer that has been quiet for
// a while, never one in the middle of a batch (whose requests would be answered 503).
func (s *Sequencer) LastActive() time.Time {
	if s.busy.Load() {
		return time.Now()
	}
	return time.Unix(0, s.active.Load())
}

// ConsumerName is the durable consumer on SVC_APPEND through which the sequencer of
// tenant takes its requests; one exists only while the tenant is active.
func ConsumerName(tenant string) string { return "seq-" + tenant }

// Release deletes the tenant's consumer on SVC_APPEND after Run returned, so an idle
// tenant holds none (requests published meanwhile stay in the stream for the next
// sequencer). Call it only on a stop this process chose (quiet, hand-over, shutdown):
// after a lost lease the consumer is the new holder's.
func (s *Sequencer) Release(ctx context.Context) error {
	if s.cfg.Requests != nil {
		return nil // the channel's owner consumes
	}
	err := s.js.DeleteConsumer(ctx, pipeline.AppendStream, ConsumerName(s.cfg.Tenant))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	return err
}

// Ready is closed once Run has recovered and consumes append requests.
func (s *Sequencer) Ready() <-chan struct{} { return s.ready }

// Tree is the tenant's tree, for read routes (safe for concurrent readers).
func (s *Sequencer) Tree() *merkle.Tree { return s.tree }

// Close syncs and closes the tree store. Call it after Run returned.
func (s *Sequencer) Close() error {
	err := s.checkpoint()
	return errors.Join(err, s.store.Close())
}

type state struct {
	TreeSize  uint64 `json:"treeSize"`
	StreamSeq uint64 `json:"streamSeq"` // stream sequence of the batch that ends at TreeSize
}

// checkpoint syncs the tree store, then records how far it reaches in the stream;
// nothing when the state file already says so (a tenant started or stopped without
// appending: two fsyncs fewer per start and stop).
func (s *Sequencer) checkpoint() error {
	now := state{TreeSize: s.tree.Size(), StreamSeq: s.lastSeq}
	if s.synced != nil && *s.synced == now {
		s.lastCkpt = s.cfg.Now()
		return nil
	}
	if err := s.store.Sync(); err != nil {
		return err
	}
	data, _ := json.Marshal(now)
	s.lastCkpt = s.cfg.Now()
	if err := receipt.WriteFileAtomic(s.statePath, data, 0o644); err != nil {
		return err
	}
	s.synced = &now
	return nil
}

// readState is the state file's record, when there is a readable one.
func (s *Sequencer) readState() (state, bool) {
	var st state
	data, err := os.ReadFile(s.statePath)
	return st, err == nil && json.Unmarshal(data, &st) == nil
}

// Run recovers from the stream, then sequences until ctx ends (returning nil) or the
// sequencer is fenced (ErrFenced) or the broker fails. After a broker failure Run may
// be called again: it recovers from the stream again and goes on.
func (s *Sequencer) Run(ctx context.Context) error {
	err := s.run(ctx)
	if ctx.Err() != nil && !errors.Is(err, ErrFenced) {
		return nil
	}
	return err
}

// Recover brings the tree store up to the last committed batch without taking
// requests (svc replay tree), and syncs it; Run does it first itself.
func (s *Sequencer) Recover(ctx context.Context) error {
	if err := s.recoverTree(ctx); err != nil {
		return err
	}
	return s.checkpoint()
}

// recoverTree is Recover without the final sync. Run leaves that to its periodic
// checkpoint (or to Close), as for the leaves it appends: a tenant's start, on its
// first request's path, then costs no fsync for the leaves it replayed, and a crash
// before the sync replays them again.
func (s *Sequencer) recoverTree(ctx context.Context) error {
	var err error
	if s.cfg.Leaves != nil {
		s.stream = s.cfg.Leaves
	} else if s.stream, err = s.js.Stream(ctx, pipeline.LeavesStream); err != nil {
		return fmt.Errorf("sequencer %s: stream %s: %w", s.cfg.Tenant, pipeline.LeavesStream, err)
	}
	return s.recover(ctx)
}

func (s *Sequencer) run(ctx context.Context) error {
	start := time.Now()
	s.active.Store(start.UnixNano())
	if err := s.recoverTree(ctx); err != nil {
		return err
	}
	if s.lastCkpt.IsZero() {
		s.lastCkpt = s.cfg.Now() // the first sync comes CheckpointEvery after the start
	}
	if err := s.adopt(ctx); err != nil {
		return err
	}
	s.log.Info("sequencer ready", "size", s.tree.Size(), "streamSeq", s.lastSeq, "recovery", time.Since(start).Round(time.Millisecond))
	in, stop, err := s.requests(ctx)
	if err != nil {
		return err
	}
	defer stop()
	s.readyOne.Do(func() { close(s.ready) })
	var carry jetstream.Msg
	for {
		var batch []jetstream.Msg
		if carry != nil {
			batch, carry = append(batch, carry), nil
		} else {
			select {
			case <-ctx.Done():
				stop()
				return nil
			case m := <-in:
				batch = append(batch, m)
			}
		}
		size, leaves := len(batch[0].Data())+5, pipeline.RequestLeaves(batch[0].Headers())
	drain:
		for leaves < s.cfg.MaxBatch {
			select {
			case m := <-in:
				n := pipeline.RequestLeaves(m.Headers())
				if size+len(m.Data())+5 > pipeline.MaxBatchBytes-16 || leaves+n > s.cfg.MaxBatch {
					carry = m
					break drain
				}
				size, leaves = size+len(m.Data())+5, leaves+n
				batch = append(batch, m)
			default:
				break drain
			}
		}
		s.active.Store(time.Now().UnixNano())
		s.busy.Store(true)
		err := s.process(ctx, batch)
		s.busy.Store(false)
		s.active.Store(time.Now().UnixNano())
		if err != nil {
			return err
		}
		if s.cfg.Now().Sub(s.lastCkpt) >= s.cfg.CheckpointEvery {
			if err := s.checkpoint(); err != nil {
				return fmt.Errorf("sequencer %s: checkpoint: %w", s.cfg.Tenant, err)
			}
		}
	}
}

// requests is where Run takes its requests: cfg.Requests, or the tenant's own
// durable consumer, which stop stops (handing back what it pulled; idempotent).
func (s *Sequencer) requests(ctx context.Context) (<-chan jetstream.Msg, func(), error) {
	if s.cfg.Requests != nil {
		return s.cfg.Requests, func() {}, nil
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, pipeline.AppendStream, jetstream.ConsumerConfig{
		Durable:       ConsumerName(s.cfg.Tenant),
		FilterSubject: pipeline.AppendSubject(s.cfg.Tenant),
		AckPolicy:     jetstream.AckExplicitPolicy, // a work queue requires it
		AckWait:       5 * time.Second,
		MaxAckPending: 1 << 16,
		MaxDeliver:    -1,
		// A running sequencer pulls without pause; the consumer of one that died with
		// its process (kill -9) is removed by the broker after this long, so consumers
		// never pile up for tenants that went idle that way.
		InactiveThreshold: consumerInactive,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("sequencer %s: consumer: %w", s.cfg.Tenant, err)
	}
	in := make(chan jetstream.Msg, 2*s.cfg.MaxBatch)
	// PullExpiry 4 s, idle heartbeat 500 ms: when the consumer's leader node is lost,
	// the pull request it held is lost too and the client re-issues one only after two
	// missed heartbeats; nats.go's default (30 s expiry) stalled the tenant for 30 s,
	// and a 2 s heartbeat made the tenant wait for the consumer's election in steps of
	// 4 s, since a pull re-issued before the election is lost again
	// (docs/design/cluster.md).
	cc, err := cons.Consume(func(m jetstream.Msg) { in <- m }, jetstream.PullMaxMessages(s.cfg.MaxBatch), jetstream.PullExpiry(4*time.Second), jetstream.PullHeartbeat(500*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return in, func() { once.Do(func() { cc.Stop(); handBack(in) }) }, nil
}

// handBack returns the requests this sequencer pulled but did not take up (a clean
// stop, or a hand-over to another process) to the work queue at once, so the next
// sequencer answers them now rather than after the consumer's AckWait.
func handBack(in chan jetstream.Msg) {
	for {
		select {
		case m := <-in:
			_ = m.Nak()
		default:
			return
		}
	}
}

// request is one leaf of a batch: a single append request, or one leaf of a bundle.
type request struct {
	inbox  string // a single request's inbox; "" for a bundle's leaf (or no answer wanted)
	bundle int    // the bundle's place in the batch's bundles; -1 for a single request
	leaf   pipeline.Leaf
	index  uint64
	fresh  bool // gets a new index in this batch
	reply  *pipeline.Reply
}

// bundle is a bundle request of a batch, answered with one reply.
type bundle struct {
	inbox string
	reply *pipeline.Reply // the whole bundle refused (malformed)
	first int             // its first leaf in the batch's requests
	count int
}

// intake reads the batch's messages into one request per leaf (a bundle gives one
// per leaf it carries) and the bundles to answer.
func intake(msgs []jetstream.Msg) ([]request, []bundle) {
	reqs := make([]request, 0, len(msgs))
	var bundles []bundle
	for _, m := range msgs {
		h := m.Headers()
		if h.Get(pipeline.HeaderKind) != pipeline.KindBundle {
			leaf, inbox, err := pipeline.ParseRequest(&nats.Msg{Header: h, Data: m.Data()})
			r := request{inbox: inbox, bundle: -1, leaf: leaf}
			if err != nil {
				r.reply = &pipeline.Reply{Refusal: pipeline.AsRefusal(err)}
			}
			reqs = append(reqs, r)
			continue
		}
		b := bundle{inbox: h.Get(pipeline.HeaderReply), first: len(reqs)}
		entries, err := pipeline.DecodeBundle(m.Data())
		if err != nil {
			b.reply = &pipeline.Reply{Refusal: pipeline.Refuse(pipeline.ErrInvalid, 0, "%v", err)}
		}
		for _, e := range entries {
			r := request{bundle: len(bundles), leaf: e.Leaf}
			if e.Err != nil {
				r.reply = &pipeline.Reply{Refusal: e.Err}
			}
			reqs = append(reqs, r)
		}
		b.count = len(entries)
		bundles = append(bundles, b)
	}
	return reqs, bundles
}

func (s *Sequencer) process(ctx context.Context, msgs []jetstream.Msg) (err error) {
	reqs, bundles := intake(msgs)
	obs := s.cfg.Telemetry.Batch(s.cfg.Tenant, msgs, len(reqs))
	var fresh []pipeline.Leaf
	defer func() { obs.End(len(fresh), err) }()
	size := s.tree.Size()
	pending := map[merkle.Hash]uint64{}
	for i := range reqs {
		r := &reqs[i]
		if r.reply != nil {
			continue
		}
		if idx, ok := pending[r.leaf.Hash]; ok {
			r.index = idx
		} else if idx, ok := s.existing(r.leaf.Hash); ok {
			r.index = idx
		} else {
			r.index, r.fresh = size+uint64(len(fresh)), true
			pending[r.leaf.Hash] = r.index
			fresh = append(fresh, r.leaf)
		}
	}
	if len(fresh) > 0 && s.cfg.Admit != nil {
		k, err := admit(ctx, s.cfg.Admit, s.cfg.Tenant, len(fresh))
		if k < len(fresh) && ctx.Err() != nil {
			// The sequencer is stopping (quiet, handed over): its requests stay in
			// SVC_APPEND, unanswered and unacknowledged, for its next start or the
			// next holder, instead of a 503 its stop alone caused.
			return fmt.Errorf("sequencer %s: stopped while admitting: %w", s.cfg.Tenant, ctx.Err())
		}
		if k < len(fresh) {
			// The first k fresh leaves go in; the rest, and every request of this batch
			// that repeats one of them, are refused.
			ref := pipeline.AsRefusal(err)
			limit := size + uint64(k)
			for i := range reqs {
				if reqs[i].reply == nil && reqs[i].index >= limit {
					reqs[i].reply = &pipeline.Reply{Refusal: ref}
				}
			}
			fresh = fresh[:k]
		}
	}
	if len(fresh) > 0 {
		b := &pipeline.Batch{First: size, Leaves: fresh}
		if err := s.commit(ctx, b); err != nil {
			if ctx.Err() == nil {
				s.answerAll(reqs, bundles, &pipeline.Reply{Refusal: pipeline.Unavailable(err)})
			} // else stopping: left unanswered to the next start, as above
			return err
		}
		hashes := make([]merkle.Hash, len(fresh))
		for i, l := range fresh {
			hashes[i] = l.Hash
		}
		first, err := s.tree.AppendBatch(hashes)
		if err != nil {
			return fmt.Errorf("sequencer %s: tree: %w", s.cfg.Tenant, err)
		}
		for i, h := range hashes {
			s.recent.add(h, first+uint64(i))
		}
	}
	if err := s.answer(ctx, reqs, bundles); err != nil {
		return err
	}
	if s.beforeAck != nil {
		if err := s.beforeAck(); err != nil {
			return err
		}
	}
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			return err
		}
	}
	return nil
}

// existing finds a leaf already in the log among the recent ones.
func (s *Sequencer) existing(h merkle.Hash) (uint64, bool) {
	idx, ok := s.recent.get(h)
	if !ok {
		return 0, false
	}
	got, err := s.tree.LeafHash(idx)
	return idx, err == nil && got == h
}

// commitPatience is how long a commit is retried while the broker does not answer.
const commitPatience = 20 * time.Second

// commitAttempt bounds one attempt of a commit, as the raw JetStream publisher the
// fault suite compares with does: a publication sent while the stream has no leader
// is never answered, so an attempt that waited 5 s (nats.go's default) went on
// waiting up to 5 s after the election (docs/measurements/2026-11-27-cluster-faults.md).
// An attempt that timed out but landed is recognised by its Nats-Msg-Id.
const commitAttempt = 2 * time.Second

// commit writes b to the tenant's leaves subject, fenced by the last sequence.
func (s *Sequencer) commit(ctx context.Context, b *pipeline.Batch) error {
	data := b.Encode()
	var lastErr error
	// Retried (same Nats-Msg-Id, same fence) for up to commitPatience: a crashed
	// node's stream leadership takes Raft's election timeout (4-9 s) to move, and
	// a sequencer that gave up after four quick attempts turned an election into
	// a takeover (docs/measurements/2026-11-27-cluster-faults.md).
	start := time.Now()
	for attempt := 0; attempt == 0 || time.Since(start) < commitPatience; attempt++ {
		if attempt > 0 {
			if err := client.Sleep(ctx, min(time.Duration(20<<min(attempt, 3))*time.Millisecond, 100*time.Millisecond)); err != nil {
				return err
			}
		}
		if s.cfg.Hold != nil {
			if err := s.cfg.Hold(ctx); err != nil {
				return err
			}
		}
		m := nats.NewMsg(s.subject)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, s.cfg.Tenant+":"+strconv.FormatUint(b.First, 10))
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(s.lastSeq, 10))
		m.Header.Set(pipeline.HeaderFirst, strconv.FormatUint(b.First, 10))
		m.Header.Set(pipeline.HeaderCount, strconv.Itoa(len(b.Leaves)))
		cctx, cancel := context.WithTimeout(ctx, commitAttempt)
		// No retry inside nats.go (two more tries 250 ms apart on "no responders"):
		// this loop's own 100 ms pauses find a newly elected leader sooner.
		ack, err := s.js.PublishMsg(cctx, m, jetstream.WithRetryAttempts(0))
		cancel()
		var apiErr *jetstream.APIError
		switch {
		case err == nil && ack.Duplicate:
			// Our own earlier attempt landed, or another sequencer committed the same
			// first index: only identical bytes are ours.
			stored, gerr := s.stream.GetMsg(ctx, ack.Sequence)
			if gerr != nil {
				lastErr = gerr
				continue
			}
			if !bytes.Equal(stored.Data, data) {
				return ErrFenced
			}
			s.lastSeq = ack.Sequence
			return nil
		case err == nil:
			s.lastSeq = ack.Sequence
			return nil
		case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
			// Either another sequencer committed, or an earlier attempt of ours landed
			// although we saw it time out: then the last batch on our subject is ours,
			// byte for byte.
			last, gerr := s.stream.GetLastMsgForSubject(ctx, s.subject)
			if gerr == nil && bytes.Equal(last.Data, data) {
				s.log.Info("commit had landed before its answer was lost", "first", b.First, "seq", last.Sequence)
				s.lastSeq = last.Sequence
				return nil
			}
			if end, ok := batchEnd(last, gerr); ok && end < b.First {
				// Another sequencer only ever makes the log longer.
				return fmt.Errorf("%w: %d leaves of %s on %s, %d in the tree", ErrShorterLog, end, s.cfg.Tenant, pipeline.LeavesStream, b.First)
			}
			return ErrFenced
		default:
			lastErr = err
			if attempt%10 == 0 { // every second or so through an election
				s.log.Warn("commit failed; retrying", "first", b.First, "attempt", attempt+1, "err", err)
			}
		}
	}
	return fmt.Errorf("commit of leaves %d..%d: %w", b.First, b.First+uint64(len(b.Leaves))-1, lastErr)
}

// batchEnd is where the log of record ends after last, the last batch on the
// tenant's subject (0 when the subject holds none); ok is false when that is unknown.
func batchEnd(last *jetstream.RawStreamMsg, err error) (uint64, bool) {
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, true
	}
	if err != nil {
		return 0, false
	}
	first, e1 := strconv.ParseUint(last.Header.Get(pipeline.HeaderFirst), 10, 64)
	count, e2 := strconv.ParseUint(last.Header.Get(pipeline.HeaderCount), 10, 64)
	return first + count, e1 == nil && e2 == nil
}
