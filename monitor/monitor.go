// Package monitor is the outside probe of SPEC.md (`svc log-check`): it checks a log
// server, its published checkpoints and, optionally, a witness of it, using only public
// routes and public keys, and reports one named check per line.
//
// Checks, per tenant, in this order:
//
//	health                            GET <log-url>/health answers 200 with ok: true
//	key document                      the tenant's key document parses and its keys are valid
//	head signature                    the live /head is signed by a key of the key document
//	checkpoint signature              the latest checkpoint is signed by a key of the key document
//	checkpoint freshness              its signed timestamp is within --max-lag when the tree grew
//	                                  since, within a day when it did not
//	checkpoint consistent with head   the log's consistency proof from the checkpoint to the
//	                                  live head verifies
//	witness countersignature          (with a witness URL) <witness-url>/<tenant>/latest.json
//	                                  carries a valid signature by a key of
//	                                  <witness-url>/.well-known/svc-witness.json and one by the
//	                                  log, and its head is consistent with the live log
//	no alarm                          (with a witness URL) <witness-url>/<tenant>/ALARM.json
//	                                  does not exist (404)
//
// The latest checkpoint is <checkpoints-url>/<tenant>/latest.json when a checkpoints URL
// is given, and otherwise the largest one the log's /checkpoints route lists. Freshness
// is judged on the timestamp inside the signed head, not on the unsigned signedAt. Every
// fetch times out after ten seconds.
package monitor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

// Check names (SPEC.md leaves them to the implementation; these are stable).
const (
	CheckHealth                  = "health"
	CheckKeyDocument             = "key document"
	CheckHeadSignature           = "head signature"
	CheckCheckpointSignature     = "checkpoint signature"
	CheckCheckpointFreshness     = "checkpoint freshness"
	CheckCheckpointConsistent    = "checkpoint consistent with head"
	CheckWitnessCountersignature = "witness countersignature"
	CheckNoAlarm                 = "no alarm"
)

// DefaultMaxLag is the default of --max-lag.
const DefaultMaxLag = 600 * time.Second

// UnchangedMaxAge is how old the checkpoint of a log that did not grow may be.
const UnchangedMaxAge = 24 * time.Hour

// clockSkew is how far in the future a signed timestamp may be.
const clockSkew = 5 * time.Minute

// maxAnswer caps a fetched answer (a /checkpoints list can be long).
const maxAnswer = 8 << 20

// Options configure a probe.
type Options struct {
	LogURL         string
	CheckpointsURL string // optional: the host serving <tenant>/latest.json
	WitnessURL     string // optional: a witness's published output directory
	Tenants        []string
	// Policy, when set, adds CheckCosigned: each tenant's C2SP checkpoint must be
	// cosigned by the policy's quorum (cosigned.go).
	Policy *witness.Policy
	MaxLag time.Duration // default DefaultMaxLag
	Client *http.Client
	Now    func() time.Time
}

// Check is one line of the result.
type Check struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Result is SPEC.md's JSON form: { ok, checks: [{ tenant, name, ok, detail? }] }.
type Result struct {
	OK     bool    `json:"ok"`
	Checks []Check `json:"checks"`
}

// Failed lists the failed checks.
func (r *Result) Failed() []Check {
	return slices.DeleteFunc(slices.Clone(r.Checks), func(c Check) bool { return c.OK })
}

// WriteText prints one line per check, "PASS|FAIL <tenant> <name>: <detail>", then the
// result line.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, c := range r.Checks {
		word := "PASS"
		if !c.OK {
			word = "FAIL"
		}
		fmt.Fprintf(&b, "%s %s %s", word, c.Tenant, c.Name)
		if c.Detail != "" {
			fmt.Fprintf(&b, ": %s", c.Detail)
		}
		b.WriteByte('\n')
	}
	if r.OK {
		fmt.Fprintf(&b, "RESULT: OK (%d checks passed)\n", len(r.Checks))
	} else {
		fmt.Fprintf(&b, "RESULT: FAILED (%d of %d checks failed)\n", len(r.Failed()), len(r.Checks))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON prints the result as one JSON object.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// Run probes every tenant.
func Run(ctx context.Context, opts Options) (*Result, error) {
	var err error
	if opts.LogURL, err = client.CheckBaseURL("log URL", opts.LogURL); err != nil {
		return nil, err
	}
	if opts.CheckpointsURL != "" {
		if opts.CheckpointsURL, err = client.CheckBaseURL("checkpoints URL", opts.CheckpointsURL); err != nil {
			return nil, err
		}
	}
	if opts.WitnessURL != "" {
		if opts.WitnessURL, err = client.CheckBaseURL("witness URL", opts.WitnessURL); err != nil {
			return nil, err
		}
	}
	if len(opts.Tenants) == 0 {
		opts.Tenants = []string{"default"}
	}
	for _, t := range opts.Tenants {
		if !client.ValidTenant(t) {
			return nil, fmt.Errorf("tenant %q: use 1 to 63 of a-z, 0-9, - and _", t)
		}
	}
	if opts.MaxLag <= 0 {
		opts.MaxLag = DefaultMaxLag
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: client.FetchTimeout}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &probe{opts: opts, res: &Result{Checks: []Check{}}}
	if opts.WitnessURL != "" {
		p.witnessKeys, p.witnessKeysErr = p.keyDocument(ctx, opts.WitnessURL+"/"+witness.KeyDocumentRel)
	}
	for _, t := range opts.Tenants {
		p.tenant(ctx, t)
	}
	p.res.OK = len(p.res.Failed()) == 0
	return p.res, nil
}

type probe struct {
	opts           Options
	res            *Result
	witnessKeys    []signer.PublicKey
	witnessKeysErr error
}

func (p *probe) add(tenant, name string, err error, detail string) {
	c := Check{Tenant: tenant, Name: name, OK: err == nil, Detail: detail}
	if err != nil {
		c.Detail = err.Error()
	}
	p.res.Checks = append(p.res.Checks, c)
}

func (p *probe) get(ctx context.Context, u string, limit int64) ([]byte, error) {
	return client.Fetch(ctx, p.opts.Client, u, limit, nil)
}

func (p *probe) keyDocument(ctx context.Context, u string) ([]signer.PublicKey, error) {
	data, err := p.get(ctx, u, signer.MaxKeyDocumentSize)
	if err != nil {
		return nil, err
	}
	doc, err := signer.ParseKeyDocument(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return doc.PublicKeys()
}

// liveHead is a verified (or not) /head answer.
type liveHead struct {
	env *receipt.Envelope
	th  *receipt.TreeHead
}

func (p *probe) tenant(ctx context.Context, tenant string) {
	base := client.TenantBase(p.opts.LogURL, tenant)
	src := &client.LogServer{Base: base, Client: p.opts.Client}
	p.checkHealth(ctx, tenant)
	doc, keys := p.checkKeyDocument(ctx, tenant)

	// The checkpoints are read before the live head, so that the head is at least as
	// large as any of them unless the log shrank.
	cp, cpErr := p.latestCheckpoint(ctx, tenant, base)
	var wcp *client.Checkpoint
	var wErr error
	if p.opts.WitnessURL != "" {
		wcp, wErr = p.witnessCheckpoint(ctx, tenant)
	}
	head, headErr := p.head(ctx, base)

	p.checkHeadSignature(tenant, head, headErr, keys, doc.Log)
	cpOK := p.checkCheckpointSignature(tenant, cp, cpErr, keys, doc.Log)
	p.checkFreshness(tenant, cp, cpErr, cpOK, head, headErr)
	p.checkConsistent(tenant, src, cp, cpErr, head, headErr)
	if p.opts.Policy != nil {
		p.checkCosigned(ctx, tenant, src, keys, head, headErr)
	}
	if p.opts.WitnessURL == "" {
		return
	}
	p.checkCountersigned(tenant, src, wcp, wErr, keys, doc.Log, head, headErr)
	p.checkNoAlarm(ctx, tenant)
}

// checkHealth: CheckHealth.
func (p *probe) checkHealth(ctx context.Context, tenant string) {
	health, err := p.get(ctx, p.opts.LogURL+"/health", 1<<16)
	if err == nil {
		err = ParseHealth(health)
	}
	p.add(tenant, CheckHealth, err, strings.TrimSpace(string(health)))
}

// checkKeyDocument: CheckKeyDocument. It returns the document (empty when it could
// not be read) and its keys.
func (p *probe) checkKeyDocument(ctx context.Context, tenant string) (*signer.KeyDocument, []signer.PublicKey) {
	docURL := client.KeyDocumentURL(p.opts.LogURL, tenant)
	var doc *signer.KeyDocument
	var keys []signer.PublicKey
	data, err := p.get(ctx, docURL, signer.MaxKeyDocumentSize)
	if err == nil {
		if doc, err = signer.ParseKeyDocument(data); err == nil {
			keys, _ = doc.PublicKeys()
		} else {
			err = fmt.Errorf("%s: %w", docURL, err)
		}
	}
	detail := ""
	if doc != nil {
		detail = fmt.Sprintf("%d key(s), current %s", len(keys), keys[0].KeyID)
		if doc.Log != "" {
			detail += ", log " + doc.Log
		}
	}
	p.add(tenant, CheckKeyDocument, err, detail)
	if doc == nil {
		doc = &signer.KeyDocument{}
	}
	return doc, keys
}

// checkHeadSignature: CheckHeadSignature.
func (p *probe) checkHeadSignature(tenant string, head *liveHead, headErr error, keys []signer.PublicKey, logID string) {
	if headErr != nil {
		p.add(tenant, CheckHeadSignature, headErr, "")
		return
	}
	k, err := verifyHead(head.env, head.th, keys, logID)
	if err != nil {
		p.add(tenant, CheckHeadSignature, fmt.Errorf("head at size %d: %w", head.th.TreeSize, err), "")
		return
	}
	p.add(tenant, CheckHeadSignature, nil, fmt.Sprintf("size %d root %s signed by %s", head.th.TreeSize, head.th.RootHash, k.KeyID))
}

// checkCheckpointSignature: CheckCheckpointSignature; reports whether it passed.
func (p *probe) checkCheckpointSignature(tenant string, cp *client.Checkpoint, cpErr error, keys []signer.PublicKey, logID string) bool {
	if cpErr != nil {
		p.add(tenant, CheckCheckpointSignature, cpErr, "")
		return false
	}
	k, err := verifyHead(cp.File.Envelope, cp.Head, keys, logID)
	if err != nil {
		p.add(tenant, CheckCheckpointSignature, fmt.Errorf("checkpoint at size %d: %w", cp.Head.TreeSize, err), "")
		return false
	}
	p.add(tenant, CheckCheckpointSignature, nil, fmt.Sprintf("size %d root %s signed by %s", cp.Head.TreeSize, cp.Head.RootHash, k.KeyID))
	return true
}

// checkFreshness: CheckCheckpointFreshness.
func (p *probe) checkFreshness(tenant string, cp *client.Checkpoint, cpErr error, cpOK bool, head *liveHead, headErr error) {
	switch {
	case cpErr != nil:
		p.add(tenant, CheckCheckpointFreshness, errors.New("no checkpoint to judge"), "")
	case !cpOK:
		p.add(tenant, CheckCheckpointFreshness, errors.New("the checkpoint's signature does not verify, so its timestamp means nothing"), "")
	case headErr != nil:
		p.add(tenant, CheckCheckpointFreshness, errors.New("no live head to compare with"), "")
	default:
		detail, err := p.freshness(cp, head.th)
		p.add(tenant, CheckCheckpointFreshness, err, detail)
	}
}

// checkConsistent: CheckCheckpointConsistent.
func (p *probe) checkConsistent(tenant string, src *client.LogServer, cp *client.Checkpoint, cpErr error, head *liveHead, headErr error) {
	switch {
	case cpErr != nil:
		p.add(tenant, CheckCheckpointConsistent, errors.New("no checkpoint"), "")
	case headErr != nil:
		p.add(tenant, CheckCheckpointConsistent, errors.New("no live head"), "")
	default:
		detail, err := consistent(src, cp.Head, head.th)
		p.add(tenant, CheckCheckpointConsistent, err, detail)
	}
}

// checkCountersigned: CheckWitnessCountersignature.
func (p *probe) checkCountersigned(tenant string, src *client.LogServer, wcp *client.Checkpoint, wErr error, keys []signer.PublicKey, logID string, head *liveHead, headErr error) {
	switch {
	case p.witnessKeysErr != nil:
		p.add(tenant, CheckWitnessCountersignature, fmt.Errorf("witness key document: %w", p.witnessKeysErr), "")
	case wErr != nil:
		p.add(tenant, CheckWitnessCountersignature, wErr, "")
	default:
		detail, err := p.countersigned(src, wcp, keys, logID, head, headErr)
		p.add(tenant, CheckWitnessCountersignature, err, detail)
	}
}

// checkNoAlarm: CheckNoAlarm.
func (p *probe) checkNoAlarm(ctx context.Context, tenant string) {
	alarmURL := p.opts.WitnessURL + "/" + tenant + "/" + witness.AlarmFile
	data, err := p.get(ctx, alarmURL, witness.MaxAlarmSize)
	var he *client.HTTPError
	switch {
	case errors.As(err, &he) && he.Status == http.StatusNotFound:
		p.add(tenant, CheckNoAlarm, nil, "no "+alarmURL)
	case err != nil:
		p.add(tenant, CheckNoAlarm, fmt.Errorf("cannot tell whether the witness raised an alarm: %w", err), "")
	default:
		a, perr := witness.ParseAlarm(data)
		if perr != nil {
			p.add(tenant, CheckNoAlarm, fmt.Errorf("the witness published %s (unreadable: %v)", alarmURL, perr), "")
		} else {
			p.add(tenant, CheckNoAlarm, fmt.Errorf("the witness raised an alarm at %s: %s (%s); %s; see %s", a.DetectedAt, a.Summary, a.Kind, a.Evidence.Detail, alarmURL), "")
		}
	}
}

func (p *probe) head(ctx context.Context, base string) (*liveHead, error) {
	data, err := p.get(ctx, base+"/head", client.MaxCheckpointSize)
	if err != nil {
		return nil, err
	}
	env, th, err := ParseHeadAnswer(data)
	if err != nil {
		return nil, fmt.Errorf("%s/head: %w", base, err)
	}
	return &liveHead{env: env, th: th}, nil
}

// ParseHeadAnswer parses a /head answer, { treeHead: Envelope }.
func ParseHeadAnswer(data []byte) (*receipt.Envelope, *receipt.TreeHead, error) {
	var h struct {
		TreeHead json.RawMessage `json:"treeHead"`
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, nil, err
	}
	if len(h.TreeHead) == 0 || string(h.TreeHead) == "null" {
		return nil, nil, errors.New("no treeHead")
	}
	env, err := receipt.ParseEnvelope(h.TreeHead)
	if err != nil {
		return nil, nil, err
	}
	th, err := receipt.DecodeTreeHead(env)
	if err != nil {
		return nil, nil, err
	}
	return env, th, nil
}

// ParseHealth checks a /health answer: { ok: true, ... }.
func ParseHealth(data []byte) error {
	var h struct {
		OK    *bool  `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return fmt.Errorf("/health: %w", err)
	}
	if h.OK == nil || !*h.OK {
		return fmt.Errorf("/health says not ok: %s", strings.TrimSpace(string(data)))
	}
	return nil
}

// verifyHead checks a head's signature against the log's keys and, when the key
// document names a log, that the head names it too.
func verifyHead(env *receipt.Envelope, th *receipt.TreeHead, keys []signer.PublicKey, logID string) (signer.PublicKey, error) {
	if len(keys) == 0 {
		return signer.PublicKey{}, errors.New("no published key to verify it with")
	}
	k, err := env.Verify(keys)
	if err != nil {
		var ids []string
		for _, s := range env.Signatures {
			ids = append(ids, s.KeyID)
		}
		return k, fmt.Errorf("%w (signed by %v; published: %s)", err, ids, keyIDs(keys))
	}
	if logID != "" && th.Log != logID {
		return k, fmt.Errorf("names log %q; the key document is log %q's", th.Log, logID)
	}
	return k, nil
}

func keyIDs(keys []signer.PublicKey) string {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.KeyID
	}
	return strings.Join(ids, ", ")
}

func (p *probe) freshness(cp *client.Checkpoint, head *receipt.TreeHead) (string, error) {
	at, err := receipt.ParseTime(cp.Head.Timestamp)
	if err != nil {
		return "", err
	}
	age := p.opts.Now().Sub(at)
	if age < -clockSkew {
		return "", fmt.Errorf("checkpoint at size %d is signed %s in the future (%s)", cp.Head.TreeSize, (-age).Round(time.Second), cp.Head.Timestamp)
	}
	age = max(age, 0)
	if head.TreeSize > cp.Head.TreeSize {
		d := fmt.Sprintf("signed %s ago at size %d; the tree grew to %d since (limit %s)", age.Round(time.Millisecond), cp.Head.TreeSize, head.TreeSize, p.opts.MaxLag)
		if age > p.opts.MaxLag {
			return "", fmt.Errorf("checkpoint lags: %s", d)
		}
		return d, nil
	}
	d := fmt.Sprintf("signed %s ago at size %d; the tree has not grown since (limit %s)", age.Round(time.Millisecond), cp.Head.TreeSize, UnchangedMaxAge)
	if age > UnchangedMaxAge {
		return "", fmt.Errorf("no checkpoint for over a day: %s", d)
	}
	return d, nil
}

// consistent proves that old is a prefix of the live head with the log's own proof.
func consistent(src *client.LogServer, old, head *receipt.TreeHead) (string, error) {
	if old.TreeSize > head.TreeSize {
		return "", fmt.Errorf("head at size %d is ahead of the live head at size %d (the log shrank?)", old.TreeSize, head.TreeSize)
	}
	oldRoot, _ := merkle.ParseHash(old.RootHash)
	newRoot, _ := merkle.ParseHash(head.RootHash)
	if old.TreeSize == head.TreeSize {
		if oldRoot != newRoot {
			return "", fmt.Errorf("two roots at size %d: %s and, live, %s", old.TreeSize, old.RootHash, head.RootHash)
		}
		return fmt.Sprintf("same size %d and root as the live head", old.TreeSize), nil
	}
	proof, err := src.Consistency(old.TreeSize, head.TreeSize)
	if err != nil {
		return "", fmt.Errorf("consistency proof %d → %d: %w", old.TreeSize, head.TreeSize, err)
	}
	if err := merkle.VerifyConsistency(old.TreeSize, head.TreeSize, oldRoot, newRoot, proof); err != nil {
		return "", fmt.Errorf("the live log at size %d does not extend the head at size %d (root %s): %w", head.TreeSize, old.TreeSize, old.RootHash, err)
	}
	return fmt.Sprintf("consistency proof %d → %d verifies", old.TreeSize, head.TreeSize), nil
}

// latestCheckpoint reads <checkpoints-url>/<tenant>/latest.json, or, without a
// checkpoints URL, the largest checkpoint the log's /checkpoints route lists.
func (p *probe) latestCheckpoint(ctx context.Context, tenant, base string) (*client.Checkpoint, error) {
	if p.opts.CheckpointsURL != "" {
		return p.checkpointFile(ctx, p.opts.CheckpointsURL, tenant)
	}
	// /checkpoints?since=S lists those above S: search down from the live size in
	// growing steps, so a long list is never fetched whole.
	h, err := p.head(ctx, base)
	if err != nil {
		return nil, err
	}
	size := h.th.TreeSize
	for step := uint64(1); ; step *= 4 {
		since := uint64(0)
		if size > step {
			since = size - step
		}
		u := fmt.Sprintf("%s/checkpoints?since=%d", base, since)
		data, err := p.get(ctx, u, maxAnswer)
		if err != nil {
			return nil, err
		}
		cps, err := ParseCheckpointList(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", u, err)
		}
		if len(cps) > 0 {
			return slices.MaxFunc(cps, func(a, b *client.Checkpoint) int { return cmp.Compare(a.Head.TreeSize, b.Head.TreeSize) }), nil
		}
		if since == 0 {
			return nil, fmt.Errorf("%s/checkpoints lists no checkpoint", base)
		}
	}
}

// ParseCheckpointList parses a /checkpoints answer, { checkpoints: [API form] }.
func ParseCheckpointList(data []byte) ([]*client.Checkpoint, error) {
	var l struct {
		Checkpoints []json.RawMessage `json:"checkpoints"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, err
	}
	if l.Checkpoints == nil {
		return nil, errors.New("no checkpoints list")
	}
	out := make([]*client.Checkpoint, 0, len(l.Checkpoints))
	for i, raw := range l.Checkpoints {
		cp, err := client.ParseCheckpoint(raw)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %d: %w", i, err)
		}
		out = append(out, cp)
	}
	return out, nil
}

func (p *probe) witnessCheckpoint(ctx context.Context, tenant string) (*client.Checkpoint, error) {
	return p.checkpointFile(ctx, p.opts.WitnessURL, tenant)
}

// checkpointFile reads <base>/<tenant>/latest.json (a log's or a witness's) and
// checks that it is the tenant's.
func (p *probe) checkpointFile(ctx context.Context, base, tenant string) (*client.Checkpoint, error) {
	u := client.LatestCheckpointURL(base, tenant)
	data, err := p.get(ctx, u, client.MaxCheckpointSize)
	if err != nil {
		return nil, err
	}
	cp, err := client.ParseCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	if cp.File.Tenant != "" && cp.File.Tenant != tenant {
		return nil, fmt.Errorf("%s is the checkpoint of tenant %q", u, cp.File.Tenant)
	}
	return cp, nil
}

func (p *probe) countersigned(src *client.LogServer, wcp *client.Checkpoint, logKeys []signer.PublicKey, logID string, head *liveHead, headErr error) (string, error) {
	ws := wcp.File.Envelope.VerifiedBy(p.witnessKeys)
	if len(ws) == 0 {
		return "", fmt.Errorf("the witness's checkpoint at size %d carries no valid signature by a key of the witness key document (%s)", wcp.Head.TreeSize, keyIDs(p.witnessKeys))
	}
	if _, err := verifyHead(wcp.File.Envelope, wcp.Head, logKeys, logID); err != nil {
		return "", fmt.Errorf("the witness's checkpoint at size %d is not signed by the log: %w", wcp.Head.TreeSize, err)
	}
	if headErr != nil {
		return "", fmt.Errorf("countersigned by %s at size %d, but there is no live head to compare with: %w", ws[0].KeyID, wcp.Head.TreeSize, headErr)
	}
	detail, err := consistent(src, wcp.Head, head.th)
	if err != nil {
		return "", fmt.Errorf("the witness countersigned size %d, which the live log contradicts: %w", wcp.Head.TreeSize, err)
	}
	return fmt.Sprintf("size %d countersigned by %s at %s; %s", wcp.Head.TreeSize, ws[0].KeyID, wcp.File.SignedAt, detail), nil
}
