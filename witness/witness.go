package witness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// DefaultEvery is the default time between two cycles.
const DefaultEvery = 300 * time.Second

// Config configures a Witness.
type Config struct {
	Key *signer.Key // the witness's own key; its signature is the countersignature
	// KeyValidFrom is the validFrom of the key in the published key document (the key
	// file's modification time, say); zero: now.
	KeyValidFrom   time.Time
	LogURL         string   // the log server's base URL (default tenant at the root)
	CheckpointsURL string   // the host serving <tenant>/latest.json
	Out            string   // output directory
	Tenants        []string // watched tenants; empty: ["default"]
	Client         *http.Client
	Logger         *slog.Logger
	Now            func() time.Time
}

// Witness countersigns a log's checkpoints after checking them (see the package doc).
type Witness struct {
	cfg  Config
	lock *os.File
}

// Outcome is what a cycle did for one tenant.
type Outcome string

// Outcomes.
const (
	Countersigned Outcome = "countersigned" // a new head (or a re-signed one) was countersigned
	Unchanged     Outcome = "unchanged"     // nothing newer than what was countersigned
	Alarmed       Outcome = "alarm"         // the log misbehaved; alarm files written, state kept
	Failed        Outcome = "error"         // could not check (unreachable, malformed); retried next cycle
)

// Result is one tenant's outcome of a cycle.
type Result struct {
	Tenant   string
	Outcome  Outcome
	TreeSize uint64 // the checkpoint's size, when one was read
	RootHash string
	Alarm    *Alarm // with Alarmed
	Err      error  // with Failed
}

// OK reports whether the outcome is countersigned or unchanged.
func (r Result) OK() bool { return r.Outcome == Countersigned || r.Outcome == Unchanged }

// New checks cfg, takes the output directory's lock (one witness process per
// directory) and publishes the witness key document.
func New(cfg Config) (*Witness, error) {
	if cfg.Key == nil {
		return nil, errors.New("witness: no key")
	}
	var err error
	if cfg.LogURL, err = client.CheckBaseURL("log URL", cfg.LogURL); err != nil {
		return nil, err
	}
	if cfg.CheckpointsURL, err = client.CheckBaseURL("checkpoints URL", cfg.CheckpointsURL); err != nil {
		return nil, err
	}
	if cfg.Out == "" {
		return nil, errors.New("witness: no output directory")
	}
	if len(cfg.Tenants) == 0 {
		cfg.Tenants = []string{"default"}
	}
	seen := map[string]bool{}
	for _, t := range cfg.Tenants {
		if !client.ValidTenant(t) {
			return nil, fmt.Errorf("witness: tenant %q: use 1 to 63 of a-z, 0-9, - and _", t)
		}
		if seen[t] {
			return nil, fmt.Errorf("witness: tenant %q named twice", t)
		}
		seen[t] = true
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: client.FetchTimeout}
	}
	if cfg.KeyValidFrom.IsZero() {
		cfg.KeyValidFrom = cfg.Now()
	}
	if err := os.MkdirAll(filepath.Join(cfg.Out, ".well-known"), 0o755); err != nil {
		return nil, err
	}
	w := &Witness{cfg: cfg}
	if w.lock, err = lockDir(cfg.Out); err != nil {
		return nil, err
	}
	for _, t := range cfg.Tenants {
		if err := os.MkdirAll(filepath.Join(cfg.Out, t), 0o755); err != nil {
			w.Close()
			return nil, err
		}
	}
	if err := w.publishKeyDocument(); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// Close releases the output directory.
func (w *Witness) Close() error {
	if w.lock == nil {
		return nil
	}
	err := w.lock.Close()
	w.lock = nil
	return err
}

// publishKeyDocument writes <out>/.well-known/svc-witness.json: the current key first,
// and keys listed by an earlier document after it (retired, with validTo set), so
// countersignatures they made keep verifying.
func (w *Witness) publishKeyDocument() error {
	path := filepath.Join(w.cfg.Out, KeyDocumentRel)
	cur := w.cfg.Key.Public().Entry(w.cfg.KeyValidFrom, nil)
	doc := signer.KeyDocument{Keys: []signer.KeyEntry{cur}}
	if data, err := receipt.ReadFileCapped(path, signer.MaxKeyDocumentSize); err == nil {
		if old, err := signer.ParseKeyDocument(data); err == nil {
			for _, e := range old.Keys {
				if e.KeyID == cur.KeyID {
					doc.Keys[0].ValidFrom = e.ValidFrom // keep the key's first publication
					continue
				}
				if e.ValidTo == "" {
					if from, err := receipt.ParseTime(e.ValidFrom); err == nil && w.cfg.Now().After(from) {
						e.ValidTo = signer.FormatTime(w.cfg.Now())
					}
				}
				doc.Keys = append(doc.Keys, e)
			}
		} else {
			w.cfg.Logger.Warn("replacing an unreadable witness key document", "path", path, "err", err)
		}
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if _, err := signer.ParseKeyDocument(data); err != nil {
		return err
	}
	return receipt.WriteFileAtomic(path, append(data, '\n'), 0o644)
}

// Run runs a cycle every `every` until ctx ends.
func (w *Witness) Run(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		every = DefaultEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		w.Cycle(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Cycle checks every watched tenant once.
func (w *Witness) Cycle(ctx context.Context) []Result {
	out := make([]Result, 0, len(w.cfg.Tenants))
	for _, t := range w.cfg.Tenants {
		r := w.Check(ctx, t)
		l := w.cfg.Logger.With("tenant", t, "outcome", string(r.Outcome), "size", r.TreeSize, "root", r.RootHash)
		switch r.Outcome {
		case Failed:
			l.Warn("witness could not check the log", "err", r.Err)
		case Alarmed:
			l.Error("WITNESS ALARM", "kind", r.Alarm.Kind, "summary", r.Alarm.Summary, "detail", r.Alarm.Evidence.Detail)
		default:
			l.Info("witness cycle")
		}
		out = append(out, r)
	}
	return out
}

// Check runs the cycle of SPEC.md for one tenant: fetch latest.json, verify it against
// the published keys, prove that it extends the last head this witness signed, and
// countersign it, or raise an alarm.
func (w *Witness) Check(ctx context.Context, tenant string) Result {
	c := &cycle{w: w, tenant: tenant, res: Result{Tenant: tenant}}
	var err error
	if c.st, err = w.loadState(tenant); err != nil {
		return c.fail(err) // never guess past a state we cannot read
	}
	if err := c.fetchCheckpoint(ctx); err != nil {
		return c.fail(err)
	}
	if err := c.fetchKeys(ctx); err != nil {
		return c.fail(err)
	}
	if r, done := c.checkSignatures(); done {
		return r
	}
	if c.st == nil {
		w.cfg.Logger.Info("first head of this log: nothing to prove consistency with; trusting it on first use", "tenant", tenant, "size", c.cp.Head.TreeSize)
		return w.countersign(tenant, c.cp, c.res)
	}
	return c.prove()
}

// cycle is one Check of one tenant: steps 1 to 4 of the package doc.
type cycle struct {
	w      *Witness
	tenant string
	res    Result
	st     *State             // what this witness last countersigned; nil: nothing yet
	cp     *client.Checkpoint // the offered checkpoint
	cpURL  string
	doc    *signer.KeyDocument
	docURL string
	keys   []signer.PublicKey
}

func (c *cycle) fail(err error) Result { c.res.Outcome, c.res.Err = Failed, err; return c.res }

// fetchCheckpoint is step 1: the latest checkpoint in file form.
func (c *cycle) fetchCheckpoint(ctx context.Context) error {
	c.cpURL = c.w.cfg.CheckpointsURL + "/" + c.tenant + "/" + client.LatestFile
	data, err := client.Fetch(ctx, c.w.cfg.Client, c.cpURL, client.MaxCheckpointSize, nil)
	if err != nil {
		return err
	}
	if c.cp, err = client.ParseCheckpoint(data); err != nil {
		return fmt.Errorf("%s: %w", c.cpURL, err)
	}
	c.res.TreeSize, c.res.RootHash = c.cp.Head.TreeSize, c.cp.Head.RootHash
	if c.cp.File.Tenant != "" && c.cp.File.Tenant != c.tenant {
		return fmt.Errorf("%s is the checkpoint of tenant %q", c.cpURL, c.cp.File.Tenant)
	}
	return nil
}

// fetchKeys reads the log's key document and checks it names the checkpoint's log.
func (c *cycle) fetchKeys(ctx context.Context) error {
	c.docURL = client.KeyDocumentURL(c.w.cfg.LogURL, c.tenant)
	data, err := client.Fetch(ctx, c.w.cfg.Client, c.docURL, signer.MaxKeyDocumentSize, nil)
	if err != nil {
		return err
	}
	if c.doc, err = signer.ParseKeyDocument(data); err != nil {
		return fmt.Errorf("%s: %w", c.docURL, err)
	}
	c.keys, _ = c.doc.PublicKeys() // checked by ParseKeyDocument
	if c.doc.Log != "" && c.cp.Head.Log != c.doc.Log {
		return fmt.Errorf("the checkpoint names log %q; the key document at %s is log %q's", c.cp.Head.Log, c.docURL, c.doc.Log)
	}
	// A log followed while its heads named none (svc 0.6.1 and earlier) is followed
	// under the name its heads come to carry (svc-log/<tenant> by default): a head
	// naming no log could be any log's, so the name only narrows what is accepted,
	// and the head must still extend the last one countersigned. Once named, never
	// renamed.
	if c.st != nil && c.st.LogID != c.cp.Head.Log && c.st.LogID != "" {
		return fmt.Errorf("the checkpoint names log %q; this witness has been following log %q for tenant %s", c.cp.Head.Log, c.st.LogID, c.tenant)
	}
	return nil
}

// alarm raises kind with detail and evidence, and is the cycle's result.
func (c *cycle) alarm(kind, detail string, ev Evidence) Result {
	w := c.w
	offered := &HeadRef{TreeSize: c.cp.Head.TreeSize, RootHash: c.cp.Head.RootHash, SignedAt: c.cp.File.SignedAt, Envelope: c.cp.File.Envelope}
	a := &Alarm{Kind: kind, Summary: alarmSummaries[kind], Tenant: c.tenant, LogURL: w.cfg.LogURL, CheckpointsURL: w.cfg.CheckpointsURL,
		DetectedAt: signer.FormatTime(w.cfg.Now()), Offered: offered, Evidence: ev, WitnessKeyID: w.cfg.Key.KeyID()}
	a.Evidence.Detail = detail
	if c.st != nil {
		a.Witnessed = &HeadRef{TreeSize: c.st.TreeSize, RootHash: c.st.RootHash, SignedAt: c.st.SignedAt, Envelope: c.st.Envelope}
	}
	if err := w.raise(c.tenant, a); err != nil {
		return c.fail(fmt.Errorf("alarm %s not recorded: %w", kind, err))
	}
	c.res.Outcome, c.res.Alarm = Alarmed, a
	return c.res
}

// checkSignatures is step 2: a published key must have signed the checkpoint. done
// is true when the cycle ends here.
func (c *cycle) checkSignatures() (r Result, done bool) {
	env := c.cp.File.Envelope
	var unpublished []string
	for _, s := range env.Signatures {
		if !slices.ContainsFunc(c.keys, func(k signer.PublicKey) bool { return k.KeyID == s.KeyID }) && s.KeyID != c.w.cfg.Key.KeyID() {
			unpublished = append(unpublished, s.KeyID)
		}
	}
	if _, err := env.Verify(c.keys); err != nil {
		if len(unpublished) > 0 {
			return c.alarm(AlarmUnpublishedKey, fmt.Sprintf("checkpoint at size %d is signed by %v, none of which the key document at %s lists", c.cp.Head.TreeSize, unpublished, c.docURL),
				Evidence{UnpublishedKeyIDs: unpublished, KeyDocument: c.doc}), true
		}
		return c.fail(fmt.Errorf("checkpoint at size %d: no signature verifies against the keys published at %s", c.cp.Head.TreeSize, c.docURL)), true
	}
	if len(unpublished) > 0 {
		c.w.cfg.Logger.Warn("checkpoint also carries signatures by keys the log does not publish (other witnesses?)", "tenant", c.tenant, "keyids", unpublished)
	}
	return Result{}, false
}

// prove is step 3 (and 4): the offered head extends the one this witness signed, or
// is that one, or a prefix of it.
func (c *cycle) prove() Result {
	w, st, cp, tenant := c.w, c.st, c.cp, c.tenant
	stRoot, err := merkle.ParseHash(st.RootHash)
	if err != nil {
		return c.fail(err)
	}
	src := &client.LogServer{Base: client.TenantBase(w.cfg.LogURL, tenant), Client: w.cfg.Client}
	switch {
	case cp.Head.TreeSize == st.TreeSize:
		if cp.Head.RootHash != st.RootHash {
			return c.alarm(AlarmSecondHistory, fmt.Sprintf("the log signed root %s at size %d; this witness signed root %s at that size", cp.Head.RootHash, cp.Head.TreeSize, st.RootHash), Evidence{})
		}
		if cp.File.SignedAt == st.SignedAt {
			return c.unchanged()
		}
		return w.countersign(tenant, cp, c.res) // the log re-signed the same head (heartbeat)
	case cp.Head.TreeSize > st.TreeSize:
		proof, err := src.Consistency(st.TreeSize, cp.Head.TreeSize)
		if err != nil {
			return c.fail(fmt.Errorf("consistency proof %d → %d: %w", st.TreeSize, cp.Head.TreeSize, err))
		}
		if err := merkle.VerifyConsistency(st.TreeSize, cp.Head.TreeSize, stRoot, cp.Root(), proof); err != nil {
			return c.alarm(AlarmDoesNotExtend, fmt.Sprintf("the log's consistency proof %d → %d does not prove that root %s extends root %s, which this witness signed: %v",
				st.TreeSize, cp.Head.TreeSize, cp.Head.RootHash, st.RootHash, err),
				Evidence{Consistency: &Proof{OldSize: st.TreeSize, NewSize: cp.Head.TreeSize, Hashes: receipt.HashStrings(proof)}})
		}
		return w.countersign(tenant, cp, c.res)
	default: // an older checkpoint than the one countersigned: fine only if it is a prefix
		proof, err := src.Consistency(cp.Head.TreeSize, st.TreeSize)
		if err != nil {
			return c.fail(fmt.Errorf("latest.json is at size %d, below the %d this witness signed, and the consistency proof failed: %w", cp.Head.TreeSize, st.TreeSize, err))
		}
		if err := merkle.VerifyConsistency(cp.Head.TreeSize, st.TreeSize, cp.Root(), stRoot, proof); err != nil {
			return c.alarm(AlarmDoesNotExtend, fmt.Sprintf("latest.json went back to size %d with root %s, which is not a prefix of the head this witness signed at size %d: %v",
				cp.Head.TreeSize, cp.Head.RootHash, st.TreeSize, err),
				Evidence{Consistency: &Proof{OldSize: cp.Head.TreeSize, NewSize: st.TreeSize, Hashes: receipt.HashStrings(proof)}})
		}
		w.cfg.Logger.Warn("latest.json is older than the head this witness signed (a stale copy?)", "tenant", tenant, "size", cp.Head.TreeSize, "witnessed", st.TreeSize)
		return c.unchanged()
	}
}

// unchanged: nothing new to countersign; the last countersignature stays published.
func (c *cycle) unchanged() Result {
	if err := c.w.ensurePublished(c.tenant, c.st); err != nil {
		return c.fail(err)
	}
	c.res.Outcome = Unchanged
	return c.res
}

func (w *Witness) tenantDir(tenant string) string { return filepath.Join(w.cfg.Out, tenant) }

func (w *Witness) loadState(tenant string) (*State, error) {
	path := filepath.Join(w.tenantDir(tenant), StateFile)
	data, err := receipt.ReadFileCapped(path, MaxStateSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st, err := ParseState(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (fix or remove it by hand; the witness will not guess)", path, err)
	}
	if st.Tenant != tenant {
		return nil, fmt.Errorf("%s is the state of tenant %q", path, st.Tenant)
	}
	return st, nil
}

// countersign persists the new state, then publishes the countersigned checkpoint.
func (w *Witness) countersign(tenant string, cp *client.Checkpoint, res Result) Result {
	now := w.cfg.Now()
	st := &State{Tenant: tenant, LogID: cp.Head.Log, TreeSize: cp.Head.TreeSize, RootHash: cp.Head.RootHash, SignedAt: cp.File.SignedAt,
		WitnessedAt: signer.FormatTime(now), Envelope: cp.File.Envelope}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		res.Outcome, res.Err = Failed, err
		return res
	}
	// The state moves first: after a crash here the witness has promised nothing it
	// does not remember.
	if err := receipt.WriteFileAtomic(filepath.Join(w.tenantDir(tenant), StateFile), append(data, '\n'), 0o644); err != nil {
		res.Outcome, res.Err = Failed, fmt.Errorf("witness state not saved: %w", err)
		return res
	}
	if err := w.publish(tenant, st); err != nil {
		res.Outcome, res.Err = Failed, err
		return res
	}
	res.Outcome = Countersigned
	return res
}

// publish writes <out>/<tenant>/<treeSize>.json and latest.json: the log's envelope
// with this witness's signature added.
func (w *Witness) publish(tenant string, st *State) error {
	env := *st.Envelope
	env.Signatures = slices.Clone(st.Envelope.Signatures)
	env.AddSignature(w.cfg.Key)
	f := client.CheckpointFile{Tenant: tenant, LogID: st.LogID, TreeSize: st.TreeSize, RootHash: st.RootHash, SignedAt: st.SignedAt, Envelope: &env}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	dir := w.tenantDir(tenant)
	if err := receipt.WriteFileAtomic(filepath.Join(dir, strconv.FormatUint(st.TreeSize, 10)+".json"), data, 0o644); err != nil {
		return err
	}
	return receipt.WriteFileAtomic(filepath.Join(dir, client.LatestFile), data, 0o644)
}

// ensurePublished republishes the state's head if latest.json does not carry it (a
// crash between saving the state and publishing).
func (w *Witness) ensurePublished(tenant string, st *State) error {
	data, err := receipt.ReadFileCapped(filepath.Join(w.tenantDir(tenant), client.LatestFile), client.MaxCheckpointSize)
	if err == nil {
		if cp, err := client.ParseCheckpoint(data); err == nil && cp.Head.TreeSize == st.TreeSize && cp.Head.RootHash == st.RootHash &&
			len(cp.File.Envelope.VerifiedBy([]signer.PublicKey{w.cfg.Key.Public()})) == 1 {
			return nil
		}
	}
	w.cfg.Logger.Info("republishing the countersigned head", "tenant", tenant, "size", st.TreeSize)
	return w.publish(tenant, st)
}

// raise writes ALARM.json and a uniquely named ALARM-<time>.json, unless ALARM.json
// already records the same refusal (then the alarm persists and nothing is rewritten).
func (w *Witness) raise(tenant string, a *Alarm) error {
	dir := w.tenantDir(tenant)
	latest := filepath.Join(dir, AlarmFile)
	if data, err := receipt.ReadFileCapped(latest, MaxAlarmSize); err == nil {
		if prev, err := ParseAlarm(data); err == nil && prev.same(a) {
			return nil
		}
	}
	data, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if _, err := writeUnique(dir, "ALARM-"+w.cfg.Now().UTC().Format(alarmStamp), ".json", data); err != nil {
		return err
	}
	return receipt.WriteFileAtomic(latest, data, 0o644)
}

// alarmStamp is RFC 3339 basic format with nanoseconds, e.g. 20260102T030405.123456789Z.
const alarmStamp = "20060102T150405.000000000Z"

// writeUnique writes data to <dir>/<stem><ext>, or <stem>-2<ext>, -3... if taken: the
// file is written and fsynced under a temporary name and hard-linked into place, which
// fails rather than replaces when the name exists.
func writeUnique(dir, stem, ext string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, ".alarm.tmp-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	for i := 1; i < 10000; i++ {
		name := stem + ext
		if i > 1 {
			name = fmt.Sprintf("%s-%d%s", stem, i, ext)
		}
		path := filepath.Join(dir, name)
		err := os.Link(tmp, path)
		if err == nil {
			if d, err := os.Open(dir); err == nil {
				_ = d.Sync()
				d.Close()
			}
			return path, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("no free name for %s%s", stem, ext)
}
