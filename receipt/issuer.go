package receipt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"svc.dev/svc/signer"
)

// Issuer is the issuer core shared by the gateway and the SDK: it builds, signs, logs
// and writes receipts. Construct it with NewIssuer; the fields are read-only after.
type Issuer struct {
	key         *signer.Key
	kind        string
	framework   string
	log         Log
	receiptsDir string
	now         func() time.Time
	newID       func() string
	behind      *bundleWriter // nil: bundle files are written durably before a call returns
}

// IssuerConfig configures an Issuer.
type IssuerConfig struct {
	Key         *signer.Key      // signs every receipt and authorization; required
	Kind        string           // KindGateway or KindSDK; required
	Framework   string           // SDK receipts: the host framework (optional)
	Log         Log              // required
	ReceiptsDir string           // where <id>.json files go; required, created if absent
	Now         func() time.Time // nil: time.Now
	NewID       func() string    // nil: random UUIDs

	// WriteBehind writes bundle files after Finish and Authorize return, in a
	// background writer without fsync; Log must then be a *FileLog. The receipt is
	// durable when they return all the same: its envelope is a line of the fsynced
	// log file. The writer waits for a moment without calls in progress (at most
	// 20 ms), syncs the files with syncfs and records how far they are durable in
	// MarkFile; NewIssuer rebuilds from the log any file a crash lost after that
	// mark. Close (or Flush) waits for every file. Without WriteBehind every bundle
	// file is written and fsynced before Finish returns (the only choice with a
	// remote log, which may hold the leaf's hash only).
	WriteBehind bool
	Logger      *slog.Logger // nil: slog.Default(); reports of the write-behind writer
}

// NewIssuer checks cfg and makes an Issuer.
func NewIssuer(cfg IssuerConfig) (*Issuer, error) {
	switch {
	case cfg.Key == nil:
		return nil, errors.New("issuer: no signing key")
	case cfg.Kind != KindGateway && cfg.Kind != KindSDK:
		return nil, fmt.Errorf("issuer: kind %q, want %q or %q", cfg.Kind, KindGateway, KindSDK)
	case cfg.Log == nil:
		return nil, errors.New("issuer: no log")
	case cfg.ReceiptsDir == "":
		return nil, errors.New("issuer: no receipts directory")
	}
	if err := os.MkdirAll(cfg.ReceiptsDir, 0o755); err != nil {
		return nil, fmt.Errorf("issuer: receipts directory: %w", err)
	}
	is := &Issuer{key: cfg.Key, kind: cfg.Kind, framework: cfg.Framework, log: cfg.Log,
		receiptsDir: cfg.ReceiptsDir, now: cfg.Now, newID: cfg.NewID}
	if is.now == nil {
		is.now = time.Now
	}
	if is.newID == nil {
		is.newID = uuid.NewString
	}
	if cfg.WriteBehind {
		fl, ok := cfg.Log.(*FileLog)
		if !ok {
			return nil, fmt.Errorf("issuer: WriteBehind needs a local log file (a *FileLog), not a %T", cfg.Log)
		}
		logger := cfg.Logger
		if logger == nil {
			logger = slog.Default()
		}
		from := readMark(cfg.ReceiptsDir, fl, logger)
		mark, err := recoverBundles(cfg.ReceiptsDir, fl, cfg.Key, from, logger)
		if err != nil {
			return nil, err
		}
		if is.behind, err = newBundleWriter(cfg.ReceiptsDir, fl, logger, mark); err != nil {
			return nil, err
		}
	}
	return is, nil
}

// Flush waits until every bundle file of a call that has returned is written and on
// stable storage. It is a no-op without WriteBehind.
func (is *Issuer) Flush() error {
	if is.behind == nil {
		return nil
	}
	return is.behind.flush()
}

// Close waits for the calls in progress, flushes the bundle files (see Flush) and
// stops the issuer: later calls fail with ErrIssuerClosed when WriteBehind is set. It
// reports the writes and syncs that failed. It does not close the log.
func (is *Issuer) Close() error {
	if is.behind != nil {
		return is.behind.close()
	}
	return nil
}

// KeyID is the issuer key's id.
func (is *Issuer) KeyID() string { return is.key.KeyID() }

// Call is what the issuer knows of a tool call before its outcome.
type Call struct {
	Principal  Principal
	Agent      Agent
	Delegation *Delegation // gateway receipts
	Session    Session
	Model      Model
	Tool       Tool
	Args       json.RawMessage // nil is recorded as {}
	Facts      map[string]Fact // nil is recorded as {}
	Consumed   *Consumed
	Relayed    *Relayed // set after forwarding (Pending.SetRelayed); nil when none
	Policy     *Policy  // nil when no policy was evaluated
}

// Pending is a receipt under construction: its id and timestamp are fixed when the
// call is begun, so the authorization and the receipt share them.
type Pending struct {
	ReceiptID     string
	Timestamp     string
	call          Call
	args          canonicalJSON // call.Args in canonical form
	argsDigest    string
	authorization *Authorization
}

// SetRelayed records, before Finish, the requests the upstream sent the agent within
// the call (nil or empty: none).
func (p *Pending) SetRelayed(r *Relayed) {
	if r != nil && len(r.Requests) == 0 {
		r = nil
	}
	p.call.Relayed = r
}

// Authorization returns the logged authorization, if Authorize succeeded.
func (p *Pending) Authorization() *Authorization { return p.authorization }

// Begin fixes the receipt id and timestamp of a call and digests its arguments.
func (is *Issuer) Begin(call Call) (*Pending, error) {
	if call.Args == nil {
		call.Args = json.RawMessage(`{}`)
	}
	if call.Facts == nil {
		call.Facts = map[string]Fact{}
	}
	args, err := canonicalize(call.Args, 0)
	if err != nil {
		return nil, fmt.Errorf("request args: canonical json: %w", err)
	}
	id := is.newID()
	if !isReceiptFileID(id) { // it names the receipt's files
		return nil, fmt.Errorf("issuer: receipt id %q is not a plain file name (letters, digits, - and _, at most 128)", id)
	}
	return &Pending{ReceiptID: id, Timestamp: FormatTime(is.now()), call: call, args: args, argsDigest: sha256Hex(args.text)}, nil
}

func (is *Issuer) issuerInfo() IssuerInfo {
	return IssuerInfo{Kind: is.kind, KeyID: is.key.KeyID(), Version: Version, Framework: is.framework}
}

func (is *Issuer) request(p *Pending) Request {
	return Request{Args: p.call.Args, ArgsDigest: p.argsDigest, Provenance: Claimed}
}

// Authorize signs the authorization statement of a pre-committed call, appends it to
// the log and writes receipts/<id>.authorization.json. An error means the call must be
// withheld; it wraps the log's error.
func (is *Issuer) Authorize(ctx context.Context, p *Pending) error {
	c := p.call
	pred := AuthorizationPredicate{
		ReceiptID: p.ReceiptID, Timestamp: p.Timestamp, Issuer: is.issuerInfo(),
		Principal: c.Principal, Agent: c.Agent, Delegation: c.Delegation, Tool: c.Tool,
		Request: is.request(p), Facts: c.Facts, Consumed: c.Consumed, Policy: c.Policy,
	}
	env, err := is.signStatement(c.Tool.Name, p, PredicateAuthorization, &pred, 0, func(b []byte) ([]byte, bool, error) {
		return appendCanonicalAuthorization(b, &pred, p.canonicalArgs())
	})
	if err != nil {
		return err
	}
	b, err := is.logAndWrite(ctx, p.ReceiptID+".authorization.json", env)
	if err != nil {
		return err
	}
	p.authorization = &Authorization{Envelope: env, TreeHead: b.TreeHead, Inclusion: b.Inclusion}
	return nil
}

// Leaf is the log leaf (the canonical receipt envelope) Finish would append for this
// outcome, without logging or writing anything: a gateway sizes a receipt against the
// log's cap before it forwards the call.
func (is *Issuer) Leaf(p *Pending, exec Execution) ([]byte, error) {
	env, err := is.receiptEnvelope(p, exec)
	if err != nil {
		return nil, err
	}
	return env.Canonical(), nil
}

// ErrResultJSON: Finish (or Leaf) was given an execution result that is not JSON a
// receipt can record (RFC 8785: valid UTF-8, no duplicate names, I-JSON numbers).
// Nothing was signed or logged.
var ErrResultJSON = errors.New("execution result")

// Finish records the outcome: it signs the receipt, appends its leaf to the log and
// writes receipts/<id>.json. If the log does not take the leaf, nothing is written and
// the error wraps the log's error. ResultDigest is filled in when a result is present.
func (is *Issuer) Finish(ctx context.Context, p *Pending, exec Execution) (*Bundle, error) {
	env, err := is.receiptEnvelope(p, exec)
	if err != nil {
		return nil, err
	}
	return is.logAndWrite(ctx, p.ReceiptID+".json", env)
}

func (is *Issuer) receiptEnvelope(p *Pending, exec Execution) (*Envelope, error) {
	var result *canonicalJSON // canonicalized once, for its digest and the predicate
	if exec.Result != nil {
		c, err := canonicalize(exec.Result, 0)
		if err != nil {
			return nil, fmt.Errorf("%w: canonical json: %w", ErrResultJSON, err)
		}
		result = &c
		if exec.ResultDigest == "" {
			exec.ResultDigest = sha256Hex(c.text)
		}
	}
	c := p.call
	pred := Predicate{
		ReceiptID: p.ReceiptID, Timestamp: p.Timestamp, Issuer: is.issuerInfo(),
		Principal: c.Principal, Agent: c.Agent, Delegation: c.Delegation, Session: c.Session,
		Model: c.Model, Tool: c.Tool, Request: is.request(p), Facts: c.Facts, Consumed: c.Consumed,
		Relayed: c.Relayed, Authorization: p.authorization, Policy: c.Policy, Execution: exec,
	}
	extra := len(exec.Result) + len(exec.Upstream)
	if a := p.authorization; a != nil && a.Envelope != nil {
		extra += 2*len(a.Envelope.Payload) + 1024
	}
	return is.signStatement(c.Tool.Name, p, PredicateReceipt, &pred, extra, func(b []byte) ([]byte, bool, error) {
		return appendCanonicalPredicate(b, &pred, p.canonicalArgs(), result)
	})
}

// canonicalArgs is what the predicate writers need of the arguments digested by Begin.
func (p *Pending) canonicalArgs() predicateArgs {
	return predicateArgs{args: p.args, ok: p.args.text != nil}
}

// logAndWrite appends env's leaf and writes its bundle file as name: before returning,
// or behind it (WriteBehind).
func (is *Issuer) logAndWrite(ctx context.Context, name string, env *Envelope) (*Bundle, error) {
	var tok, lowerBound uint64
	if is.behind != nil {
		var err error
		if tok, lowerBound, err = is.behind.reserve(); err != nil {
			return nil, err
		}
	}
	proof, err := is.log.Append(ctx, env.Canonical())
	if err != nil {
		if is.behind != nil {
			is.behind.cancel(tok)
		}
		return nil, err
	}
	b := &Bundle{Envelope: env, TreeHead: proof.TreeHead, Inclusion: proof.Inclusion}
	if is.behind != nil {
		if proof.Inclusion.LeafIndex < lowerBound {
			// The leaf was in the log already: the call that logged it writes (or
			// wrote) its file, and recovery covers it; rewriting it here could move
			// it after the mark had passed it.
			is.behind.cancel(tok)
			return b, nil
		}
		is.behind.enqueue(tok, name, b)
		return b, nil
	}
	if err := is.write(name, b); err != nil {
		return nil, err
	}
	return b, nil
}

// signStatement signs the statement of a call around pred, which direct writes in
// canonical form (see canonicalStatement).
// extra is the size of what the predicate holds beyond the call (result, embedded
// authorization), to size the buffer.
func (is *Issuer) signStatement(tool string, p *Pending, predicateType string, pred any, extra int, direct func([]byte) ([]byte, bool, error)) (*Envelope, error) {
	hint := len(p.args.text) + extra
	if d := p.call.Delegation; d != nil && d.Envelope != nil {
		hint += 2 * len(d.Envelope.Payload)
	}
	payload, err := canonicalStatement(tool, p.ReceiptID, p.argsDigest, predicateType, pred, hint, direct)
	if err != nil {
		return nil, err
	}
	return Sign(PayloadInToto, payload, is.key), nil
}

func (is *Issuer) write(name string, b *Bundle) error {
	data, err := bundleFile(b)
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(is.receiptsDir, name), data, 0o644)
}

// Resume replaces the call record of a pending receipt, keeping its id and timestamp:
// a gateway fixes the receipt id first (upstreams see it in fact lookups) and learns
// the facts and the policy decision after.
func (is *Issuer) Resume(p *Pending, call Call) (*Pending, error) {
	if p.authorization != nil {
		return nil, errors.New("issuer: the call was already authorized; its record can no longer change")
	}
	if call.Args == nil {
		call.Args = json.RawMessage(`{}`)
	}
	if call.Facts == nil {
		call.Facts = map[string]Fact{}
	}
	if bytes.Equal(call.Args, p.call.Args) { // the arguments are digested already
		return &Pending{ReceiptID: p.ReceiptID, Timestamp: p.Timestamp, call: call, args: p.args, argsDigest: p.argsDigest}, nil
	}
	q, err := is.Begin(call)
	if err != nil {
		return nil, err
	}
	q.ReceiptID, q.Timestamp = p.ReceiptID, p.Timestamp
	return q, nil
}
