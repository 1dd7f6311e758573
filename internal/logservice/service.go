// Package logservice assembles a whole log service process: the broker (embedded,
// internal/natsembed, or reached by URL), the streams, one sequencer per tenant
// (internal/sequencer), the projections that follow the log of record
// (internal/projections: the log file, metering, checkpoints, the audit trail) and the
// HTTP front (internal/logserver). `svc log` and `svc up` are flags around [Start].
package logservice

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/client"
	"svc.dev/svc/httplimits"
	"svc.dev/svc/internal/logserver"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/sequencer"
	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// TenantSpec is one log the service runs.
type TenantSpec struct {
	// ID is the tenant: the path segment of its routes and the subject suffix of its
	// streams (svc.append.<id>, svc.leaves.<id>); 1 to 63 of a-z, 0-9, - and _,
	// unique in Tenants. Required.
	ID string
	// LogID is the logId its checkpoints name (SPEC.md).
	LogID string
	// File, when set, is a SPEC.md log file kept in step with the log (file mode). A
	// file that already holds leaves the log lacks is adopted into the log at start.
	// Empty: no file.
	File string
	// TokenHashes are the SHA-256 of each bearer token that may append and read the
	// tenant's leaves; none: no token is accepted.
	TokenHashes [][32]byte
	// Plan is reported by /usage: free, team or enterprise. Empty: enterprise (no
	// allowance), since a self-hosted file-mode log enforces none.
	Plan string
}

// Config configures the whole log service of one process. Start needs DataDir,
// Signer, Keys and either Tenants or Hosted; every other field has a default.
type Config struct {
	// DataDir holds the embedded JetStream store, the tree stores and the projections'
	// state. Required.
	DataDir string
	// NATSURL is an existing NATS cluster (nats://host:port); empty: the embedded
	// server in DataDir.
	NATSURL string
	// NATSListen, embedded only, also opens the broker on this host:port for other
	// processes (needs NATSNKeyFile); empty: in-process connections only.
	NATSListen string
	// NATSCredsFile and NATSNKeyFile log in to the broker at NATSURL (pipeline.Credentials).
	// With NATSListen, NATSNKeyFile's public key is the only user the listener admits.
	NATSCredsFile, NATSNKeyFile string
	// NATSListenPassword, with NATSListen, also admits user "svc" with this password
	// (gateways and SDKs: log.nats nats://svc:PASSWORD@host:port). Empty: no such user.
	NATSListenPassword string
	// Replicas of the streams and buckets with NATSURL: 1 (the default) on one node, 3
	// in a cluster. The embedded server always has 1.
	Replicas int
	// Signer signs every tree head (checkpoint) and is never called for anything
	// else: the in-process key or the signer service's client (signer/remote).
	// Required.
	Signer receipt.EnvelopeSigner
	// Keys returns the key document served at /v1/keys (SPEC.md), called on each
	// request to it; the signer service's document changes with a rotation. Required.
	Keys func(ctx context.Context) (*signer.KeyDocument, error)
	// Tenants are the logs of the file mode, each with its tokens; exactly one of
	// Tenants and Hosted is set.
	Tenants []TenantSpec
	// CheckpointDir receives the file form of checkpoints; empty: <DataDir>/checkpoints.
	CheckpointDir string
	// CheckpointEvery is how often a grown log's head is signed; default 300 s.
	CheckpointEvery time.Duration
	// CheckpointHeartbeat is how often the head of a log that has not grown is signed
	// again; default 21600 s (6 h).
	CheckpointHeartbeat time.Duration
	// CheckpointFirst, when set, signs a log's first checkpoint within about this long
	// of its first append instead of after CheckpointEvery (projections.Checkpointer.First).
	CheckpointFirst time.Duration
	// TrustProxy says which address of a request the per-address throttles count
	// (SPEC.md's --trust-proxy); the zero value counts the peer's address, right when
	// clients connect directly.
	TrustProxy httplimits.Proxy
	// Every checkpoint is also published as a C2SP signed note (Dir/<tenant>/checkpoint,
	// and in hosted mode the database), signed by Signer's key (in process, or through
	// the signer service), or by NoteKey when set, and cosigned by the C2SP
	// tlog-witnesses in Witnesses (their base URLs).
	NoteKey *signer.Key
	// Witnesses are C2SP tlog-witness base URLs (POST <url>/add-checkpoint); none: no
	// cosignatures.
	Witnesses []string
	// Actor names who starts the service in the audit trail ("<user>@<host>" for the
	// command line); default "svc log".
	Actor string
	// AppendTimeout bounds how long the HTTP front waits for a sequencer's answer
	// before answering 503; default 10 s.
	AppendTimeout time.Duration
	// Logger receives the service's structured logs; default slog.Default().
	Logger *slog.Logger
	// Telemetry receives the service's metrics and traces (telemetry.Setup), handed
	// to every component it starts (the hosted mode's store has its own field,
	// store.Store.Telemetry, set by who opens it); nil: none.
	Telemetry *telemetry.Telemetry
	// Hosted, when set, runs the database-backed server: Tenants must be empty, since
	// tenants come from SVC_ADMIN.
	Hosted *Hosted
	// NoSync turns off fsync in the embedded server (tests that measure something
	// else); never in production: an acknowledged batch could be lost in a crash.
	NoSync bool
	// Waiting, when set, is called with what the service waits for while a
	// broker-facing step fails transiently (Service.Retry: a cluster without quorum
	// or electing a leader), and with nil once that step succeeded: `svc log` answers
	// /health with it while Start has not returned.
	Waiting func(error)
}

// Service is a running log service.
type Service struct {
	cfg      Config
	srv      *server.Server // the embedded server, or nil
	nc       *nats.Conn
	client   *pipeline.Client
	mu       sync.Mutex // guards seqs and cps (hosted tenants start while running)
	seqs     map[string]*sequencer.Sequencer
	cps      map[string]*projections.Checkpointer
	hosted   *hostedState
	metering *projections.Metering
	audit    *projections.Audit
	http     *logserver.Server
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	errs     chan error
	closers  []func() error // run by Close after the components stopped
	// failing is the last transient broker failure a retrying step saw (Retry,
	// superviseSequencer), with when: /health reports it while it is fresh.
	failing atomic.Pointer[brokerFailure]
}

// brokerFailure is a transient broker failure and when it was seen.
type brokerFailure struct {
	err error
	at  time.Time
}

// Start starts everything and returns once every sequencer takes requests and
// every log file holds what the stream holds.
func Start(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.DataDir == "" || cfg.Signer == nil || cfg.Keys == nil || (len(cfg.Tenants) == 0) == (cfg.Hosted == nil) {
		return nil, errors.New("logservice: data directory, signer, key document and either tenants or the hosted mode are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CheckpointDir == "" {
		cfg.CheckpointDir = filepath.Join(cfg.DataDir, "checkpoints")
	}
	s := &Service{cfg: cfg, seqs: map[string]*sequencer.Sequencer{}, cps: map[string]*projections.Checkpointer{}, errs: make(chan error, 16)}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	if err := s.connect(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if cfg.NATSURL != "" { // from the start: a start on a cut-off node would wait there
		s.goRun("node watch", func() error { return s.watchNode(runCtx, js) })
	}
	if err := s.Retry(ctx, "streams", func(ctx context.Context) error {
		return pipeline.EnsureStreams(ctx, js, pipeline.StreamConfig{Replicas: cfg.Replicas})
	}); err != nil {
		return nil, err
	}
	if cfg.Hosted != nil {
		if err := s.startHosted(ctx, runCtx, js); err != nil {
			return nil, err
		}
		ok = true
		return s, nil
	}
	s.metering = &projections.Metering{StatePath: filepath.Join(cfg.DataDir, "projections", "metering.json"), JS: js, Telemetry: cfg.Telemetry}
	if err := os.MkdirAll(filepath.Dir(s.metering.StatePath), 0o755); err != nil {
		return nil, err
	}
	if err := s.metering.Load(); err != nil {
		return nil, err
	}
	s.goRun("metering", func() error { return s.metering.Run(runCtx) })
	s.audit = &projections.Audit{JS: js}
	if err := s.Retry(ctx, "audit trail", s.audit.Load); err != nil {
		return nil, err
	}
	var tenants []*logserver.Tenant
	for _, spec := range cfg.Tenants {
		if err := s.Retry(ctx, "audit trail of "+spec.ID, func(ctx context.Context) error { return s.reconcileAudit(ctx, spec) }); err != nil {
			return nil, fmt.Errorf("audit trail of %s: %w", spec.ID, err)
		}
		t, err := s.startTenant(ctx, runCtx, js, spec)
		if err != nil {
			return nil, err
		}
		tenants = append(tenants, t)
	}
	if s.client, err = pipeline.NewClient(s.nc, pipeline.ClientConfig{Bundle: pipeline.DefaultBundle, Retries: -1, Timeout: cfg.AppendTimeout, ResendAfter: frontResend, Header: cfg.Telemetry.InjectNATS}); err != nil {
		return nil, err
	}
	if s.http, err = logserver.New(logserver.Config{Tenants: tenants, Append: s.client, Checkpoints: true, TrustProxy: cfg.TrustProxy, Logger: cfg.Logger, Broker: s.brokerState, Telemetry: cfg.Telemetry}); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

func (s *Service) connect() error {
	var err error
	if s.cfg.NATSURL != "" {
		// A ping a second, two unanswered: a connection to a node that hangs
		// (SIGSTOP, a cut cable: no RST) is given up within ~3 s and another URL
		// tried, instead of after nats.go's 2 minutes x 2.
		s.nc, err = pipeline.Connect(s.creds(), "svc-log", nats.PingInterval(time.Second), nats.MaxPingsOutstanding(2))
		return err
	}
	s.srv, err = natsembed.Start(natsembed.Config{DataDir: s.cfg.DataDir, Listen: s.cfg.NATSListen, NKeyFile: s.cfg.NATSNKeyFile, Password: s.cfg.NATSListenPassword, NoSync: s.cfg.NoSync})
	if err != nil {
		return err
	}
	s.nc, err = natsembed.Connect(s.srv, "svc-log", s.creds())
	return err
}

// brokerState is nil while the connection to the broker is up and no retrying step
// saw the broker fail in the last brokerFresh, else what is wrong.
func (s *Service) brokerState() error {
	if st := s.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("the connection is %s; retrying", st)
	}
	if f := s.failing.Load(); f != nil && time.Since(f.at) < brokerFresh {
		return fmt.Errorf("%w; retrying", f.err)
	}
	return nil
}

// brokerFresh is how long /health reports a retrying step's last broker failure:
// longer than the longest backoff between two attempts (retryMost).
const brokerFresh = 5 * time.Second

// creds are the broker credentials of Config.
func (s *Service) creds() pipeline.Credentials {
	return pipeline.Credentials{URL: s.cfg.NATSURL, CredsFile: s.cfg.NATSCredsFile, NKeyFile: s.cfg.NATSNKeyFile}
}

func (s *Service) goRun(what string, f func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f(); err != nil {
			s.report(fmt.Errorf("%s: %w", what, err))
		}
	}()
}

func (s *Service) startTenant(ctx, runCtx context.Context, js jetstream.JetStream, spec TenantSpec) (*logserver.Tenant, error) {
	dir := filepath.Join(s.cfg.DataDir, "tenants", spec.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	fileState := filepath.Join(dir, "logfile.json")
	seq, err := s.startSequencer(ctx, runCtx, spec, dir, fileState)
	if err != nil {
		return nil, err
	}
	if spec.File != "" {
		if err := s.startLogFile(ctx, runCtx, js, spec, fileState); err != nil {
			return nil, err
		}
	}
	cp, err := s.newCheckpointer(spec, seq)
	if err != nil {
		return nil, err
	}
	entries, err := s.startEntries(runCtx, js, spec.ID, dir)
	if err != nil {
		return nil, err
	}
	s.cps[spec.ID] = cp
	s.goRun("checkpoints "+spec.ID, func() error { return cp.Run(runCtx) })
	return s.front(spec, seq, cp, entries), nil
}

// startSequencer runs the tenant's sequencer and waits until it is ready. On the first
// start on an existing log file, whatever the file holds is adopted into the log.
func (s *Service) startSequencer(ctx, runCtx context.Context, spec TenantSpec, dir, fileState string) (*sequencer.Sequencer, error) {
	var adopt []pipeline.Leaf
	if spec.File != "" {
		if _, err := os.Stat(fileState); errors.Is(err, fs.ErrNotExist) {
			if adopt, err = readLeaves(spec.File); err != nil {
				return nil, err
			}
		}
	}
	seq, err := sequencer.New(sequencer.Config{Tenant: spec.ID, LogID: spec.LogID, Conn: s.nc, Dir: dir, Signer: s.cfg.Signer, Logger: s.cfg.Logger, Adopt: adopt, Telemetry: s.cfg.Telemetry})
	if err != nil {
		return nil, err
	}
	s.seqs[spec.ID] = seq
	failed := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.superviseSequencer(runCtx, seq, spec.ID, failed)
	}()
	select {
	case <-seq.Ready():
		return seq, nil
	case err := <-failed:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// startLogFile runs the tenant's SPEC log file projection and waits until it caught up.
func (s *Service) startLogFile(ctx, runCtx context.Context, js jetstream.JetStream, spec TenantSpec, fileState string) error {
	caught := make(chan struct{})
	var once sync.Once
	p := &projections.LogFile{Path: spec.File, StatePath: fileState, Tenant: spec.ID, JS: js, Logger: s.cfg.Logger, Telemetry: s.cfg.Telemetry,
		CaughtUp: func() { once.Do(func() { close(caught) }) }}
	pfail := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := p.Run(runCtx); err != nil {
			pfail <- err
			s.report(fmt.Errorf("log file %s: %w", spec.File, err))
		}
	}()
	select {
	case <-caught:
		return nil
	case err := <-pfail:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newCheckpointer loads the tenant's checkpointer, with C2SP checkpoints (and the
// verifier key beside them) when its signer can sign notes (c2sp.go).
func (s *Service) newCheckpointer(spec TenantSpec, seq *sequencer.Sequencer) (*projections.Checkpointer, error) {
	cp := &projections.Checkpointer{Dir: s.cfg.CheckpointDir, Tenant: spec.ID, LogID: spec.LogID, Tree: seq.Tree(), Signer: s.cfg.Signer,
		Every: s.cfg.CheckpointEvery, Heartbeat: s.cfg.CheckpointHeartbeat, First: s.cfg.CheckpointFirst, Logger: s.cfg.Logger, Telemetry: s.cfg.Telemetry}
	if err := s.withNotes(cp, spec.LogID, spec.ID, seq.Tree()); err != nil { // C2SP checkpoints (c2sp.go)
		return nil, err
	}
	if cp.Note != nil {
		s.cfg.Logger.Info("C2SP checkpoints", "tenant", spec.ID, "vkey", cp.Note.VerifierKey(), "witnesses", len(s.cfg.Witnesses))
	}
	return cp, cp.Load()
}

// front is what the HTTP front serves of a tenant of the file-backed service.
func (s *Service) front(spec TenantSpec, seq *sequencer.Sequencer, cp *projections.Checkpointer, entries *projections.Entries) *logserver.Tenant {
	plan := spec.Plan
	if plan == "" {
		plan = "enterprise"
	}
	return &logserver.Tenant{
		ID: spec.ID, LogID: spec.LogID, TokenHashes: spec.TokenHashes, Tree: seq.Tree(), Signer: s.cfg.Signer, Keys: s.cfg.Keys,
		Entries: entries,
		Checkpoints: func(since uint64) ([]logserver.Checkpoint, error) {
			var out []logserver.Checkpoint
			for _, c := range cp.Since(since) {
				out = append(out, logserver.Checkpoint{TreeSize: c.TreeSize, RootHash: c.RootHash, SignedAt: c.SignedAt, TreeHead: c.Envelope})
			}
			if out == nil {
				out = []logserver.Checkpoint{}
			}
			return out, nil
		},
		Audit: func(limit int) ([]client.AuditEntry, error) { return s.AuditEntries(spec.ID, limit) },
		CheckpointNote: func() ([]byte, error) {
			return receipt.ReadFileCapped(filepath.Join(s.cfg.CheckpointDir, spec.ID, "checkpoint"), 1<<20)
		},
		Usage: func(month string) (*logserver.Usage, error) {
			appends, _ := s.metering.Appends(spec.ID, month)
			return &logserver.Usage{Month: month, Appends: appends, TotalLeaves: seq.Tree().Size(), LiveTokens: len(spec.TokenHashes), Plan: plan, Quota: PlanQuota(plan)}, nil
		},
	}
}

// reconcileAudit records, as administrative events, how the configured tenant and
// its tokens differ from what the audit trail says: a tenant seen for the first time,
// a token added, a token no longer configured. Tokens appear only as the 12-hex
// prefix of their hash.
func (s *Service) reconcileAudit(ctx context.Context, spec TenantSpec) error {
	actor := s.cfg.Actor
	if actor == "" {
		actor = "svc log"
	}
	known, live := s.audit.Tokens(spec.ID)
	rec := func(action, detail string) error {
		return s.audit.Record(ctx, client.AuditEntry{Actor: actor, Action: action, TenantID: spec.ID, Detail: detail})
	}
	if !known {
		detail := "log id " + orNone(spec.LogID)
		if spec.File != "" {
			detail += ", log file " + spec.File
		}
		if err := rec("tenant.add", detail); err != nil {
			return err
		}
	}
	want := map[string]bool{}
	for _, h := range spec.TokenHashes {
		want[hex.EncodeToString(h[:6])] = true
	}
	for _, p := range live {
		if !want[p] {
			if err := rec("token.revoke", "token "+p+" no longer configured"); err != nil {
				return err
			}
		}
	}
	for _, p := range sortedKeys(want) {
		if !slices.Contains(live, p) {
			if err := rec("token.add", "token "+p+" configured"); err != nil {
				return err
			}
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// PlanQuota is a plan's monthly allowance of appends; nil for no allowance.
func PlanQuota(plan string) *uint64 {
	var q uint64
	switch plan {
	case "free":
		q = 10000
	case "team":
		q = 1000000
	default:
		return nil
	}
	return &q
}

func readLeaves(path string) ([]pipeline.Leaf, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := merkle.ReadLogFile(f)
	if err != nil {
		return nil, fmt.Errorf("log file %s: %w", path, err)
	}
	leaves := make([]pipeline.Leaf, len(entries))
	for i, e := range entries {
		leaves[i] = pipeline.Leaf{Hash: e.Hash}
		if e.Kind == merkle.LineLeaf {
			leaves[i].Data = []byte(e.Leaf)
		}
	}
	return leaves, nil
}

// report passes a component's failure to Err without ever blocking.
func (s *Service) report(err error) {
	select {
	case s.errs <- err:
	default:
		s.cfg.Logger.Error("component stopped", "err", err)
	}
}

// Handler is the HTTP front.
func (s *Service) Handler() *logserver.Server { return s.http }

// Err reports a component that stopped (a fenced sequencer, a broken projection);
// the process should shut down.
func (s *Service) Err() <-chan error { return s.errs }

// Checkpointer returns a tenant's checkpointer (nil when another process holds it).
func (s *Service) Checkpointer(tenant string) *projections.Checkpointer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cps[tenant]
}

// Sequencer returns a tenant's sequencer (nil when another process holds it).
func (s *Service) Sequencer(tenant string) *sequencer.Sequencer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seqs[tenant]
}

// AuditEntries returns a tenant's audit trail, newest first.
func (s *Service) AuditEntries(tenant string, limit int) ([]client.AuditEntry, error) {
	return append([]client.AuditEntry{}, s.audit.Entries(tenant, limit)...), nil // [] in JSON when empty
}

// Conn is the service's NATS connection.
func (s *Service) Conn() *nats.Conn { return s.nc }

// Close stops everything, syncing the tree stores.
func (s *Service) Close() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	var errs []error
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, seq := range s.seqs {
		errs = append(errs, seq.Close())
	}
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	if s.client != nil {
		s.client.Close()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	return errors.Join(errs...)
}
