package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/exporters"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/policy"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Log kinds reported by Health.
const (
	LogKindFile = pipeline.LogKindFile
	LogKindHTTP = pipeline.LogKindHTTP
	LogKindNATS = pipeline.LogKindNATS
)

// Issuer is the in-process SDK issuer: an agent framework hands it each tool event and
// its outcome and gets a signed, logged receipt bundle back. Everything it records is
// claimed by the agent's own process: issuer.kind sdk, principal {id or null, claimed},
// agent claimed, no delegation, facts {}, tool, policy and execution claimed. It is
// safe for concurrent use.
type Issuer struct {
	core      *receipt.Issuer
	key       *signer.Key
	agentID   string
	principal *string
	policy    *policy.Policy
	sink      exporters.Sink
	logInfo   LogInfo
	dir       string
	closers   []func(context.Context) error
}

// Settings build an Issuer from parts (Open builds them from a Config).
type Settings struct {
	Key         *signer.Key    // signs every receipt; required
	AgentID     string         // required; recorded as claimed
	PrincipalID *string        // nil: recorded as null; claimed
	Framework   string         // issuer.framework; required
	Policy      *policy.Policy // optional; Decide returns nil without one
	Log         receipt.Log    // required
	LogInfo     LogInfo        // what Health reports about Log
	ReceiptsDir string         // required; created if absent
	Sink        exporters.Sink // optional; told of every receipt written
	Now         func() time.Time
	NewID       func() string
}

// LogInfo is the log part of the sidecar's /health: { kind: file, http or nats, where }.
type LogInfo struct {
	Kind  string `json:"kind"`
	Where string `json:"where"`
}

// Health is the sidecar's GET /health answer: { agentId, keyid, log: { kind, where } }.
type Health struct {
	AgentID string  `json:"agentId"`
	KeyID   string  `json:"keyid"`
	Log     LogInfo `json:"log"`
}

// Receipt is a receipt the issuer wrote.
type Receipt struct {
	ID     string          // the receipt id
	Path   string          // receipts/<id>.json
	Bundle *receipt.Bundle // as written
}

// LogError means the log would not take the receipt's leaf: no receipt was written
// (the sidecar answers 502). Err wraps receipt.ErrLogRefused or ErrLogUnavailable.
type LogError struct {
	Log LogInfo
	Err error
}

func (e *LogError) Error() string {
	return fmt.Sprintf("the %s log %s would not take the receipt's leaf, so no receipt was written: %v", e.Log.Kind, e.Log.Where, e.Err)
}

func (e *LogError) Unwrap() error { return e.Err }

// New makes an Issuer from parts.
func New(s Settings) (*Issuer, error) {
	switch {
	case s.AgentID == "":
		return nil, errors.New("sdk: no agent id")
	case s.Framework == "":
		return nil, errors.New("sdk: no framework name")
	}
	core, err := receipt.NewIssuer(receipt.IssuerConfig{
		Key: s.Key, Kind: receipt.KindSDK, Framework: s.Framework, Log: s.Log,
		ReceiptsDir: s.ReceiptsDir, Now: s.Now, NewID: s.NewID,
	})
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	return &Issuer{core: core, key: s.Key, agentID: s.AgentID, principal: s.PrincipalID, policy: s.Policy,
		sink: s.Sink, logInfo: s.LogInfo, dir: s.ReceiptsDir}, nil
}

// OpenOptions tune Open.
type OpenOptions struct {
	Stderr     io.Writer                   // exporters' drop lines; default os.Stderr
	Getenv     func(string) (string, bool) // default os.LookupEnv
	HTTPClient *http.Client                // for the HTTP log and the exporters
	Queue      exporters.QueueConfig       // exporters' delivery tuning
	Now        func() time.Time
	NewID      func() string
}

// OpenFile loads the config file at path (LoadConfig) and opens an Issuer from it
// (Open). Errors name the file.
func OpenFile(ctx context.Context, path string, o OpenOptions) (*Issuer, error) {
	c, err := LoadConfig(path)
	if err != nil {
		return nil, err
	}
	is, err := Open(ctx, c, o)
	if err != nil {
		return nil, fmt.Errorf("sdk config %s: %w", path, err)
	}
	return is, nil
}

// Open builds an Issuer from a config: it reads the key and the policy, opens the log
// (a local file, an HTTP log or the pipeline over NATS) and starts the exporters
// (durable consumers when the log is over NATS, else in-memory queues). Every
// misconfiguration is refused with an error naming the field.
func Open(ctx context.Context, c *Config, o OpenOptions) (*Issuer, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.LookupEnv
	}
	key, err := signer.LoadPrivateKey(c.Identity.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("identity.keyFile: %w", err)
	}
	var pol *policy.Policy
	if c.PolicyFile != "" {
		if pol, err = policy.Load(c.PolicyFile); err != nil {
			return nil, fmt.Errorf("policyFile: %w", err)
		}
	}
	var closers []func(context.Context) error
	fail := func(err error) (*Issuer, error) {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i](ctx)
		}
		return nil, err
	}
	log, info, nc, closeLog, err := openLog(c, key, getenv, o.HTTPClient)
	if err != nil {
		return nil, err
	}
	closers = append(closers, closeLog)
	tenant := ""
	if c.Log != nil {
		tenant = c.Log.Tenant
	}
	sink, err := exporters.New(ctx, c.Exporters(), exporters.Options{
		Stderr: o.Stderr, HTTPClient: o.HTTPClient, Getenv: getenv, Queue: o.Queue, NATS: nc, Tenant: tenant,
	})
	if err != nil {
		return fail(err)
	}
	is, err := New(Settings{
		Key: key, AgentID: c.AgentID, PrincipalID: c.PrincipalID, Framework: c.Framework, Policy: pol,
		Log: log, LogInfo: info, ReceiptsDir: c.ReceiptsDir, Sink: sink, Now: o.Now, NewID: o.NewID,
	})
	if err != nil {
		if sink != nil {
			_ = sink.Close(ctx)
		}
		return fail(fmt.Errorf("receiptsDir: %w", err))
	}
	is.closers = closers
	return is, nil
}

// openLog opens the config's log (pipeline.OpenLog): the local file, a log server over
// HTTP, or the pipeline over NATS (whose connection the exporters share). close
// releases it.
func openLog(c *Config, key *signer.Key, getenv func(string) (string, bool), hc *http.Client) (receipt.Log, LogInfo, *nats.Conn, func(context.Context) error, error) {
	l, err := pipeline.OpenLog(c.LogFile, c.Log, pipeline.LogOptions{Key: key, Name: "svc sdk " + c.AgentID, HTTPClient: hc, Getenv: getenv})
	if err != nil {
		return nil, LogInfo{}, nil, nil, err
	}
	return l.Log, LogInfo{Kind: l.Kind, Where: l.Where}, l.NATS, func(context.Context) error { return l.Close() }, nil
}

// Close flushes the exporters (until ctx ends) and closes the log.
func (is *Issuer) Close(ctx context.Context) error {
	var errs []error
	if is.sink != nil {
		errs = append(errs, is.sink.Close(ctx))
	}
	for i := len(is.closers) - 1; i >= 0; i-- {
		errs = append(errs, is.closers[i](ctx))
	}
	is.closers = nil
	return errors.Join(errs...)
}

// Health reports the agent id, the issuer's keyid and the log.
func (is *Issuer) Health() Health {
	return Health{AgentID: is.agentID, KeyID: is.key.KeyID(), Log: is.logInfo}
}

// KeyID is the issuer key's id.
func (is *Issuer) KeyID() string { return is.key.KeyID() }

// Policy is the configured policy, or nil.
func (is *Issuer) Policy() *policy.Policy { return is.policy }

// Decide evaluates the configured policy for ev: principal Agent::"<agent id>", action
// Action::"<tool>", resource Tool::"<tool>", context { args, facts: {} } (no grant:
// the SDK has no delegation). It returns nil, nil when no policy is configured. It
// records nothing.
func (is *Issuer) Decide(ev ToolEvent) (*PolicyDecision, error) {
	if err := ev.Validate(""); err != nil {
		return nil, err
	}
	if is.policy == nil {
		return nil, nil
	}
	d := is.policy.Evaluate(policy.Request{Agent: is.agentID, Tool: ev.Tool, Args: ev.Args})
	return &d, nil
}

// Record signs the receipt of ev and its outcome, appends its hash to the log, writes
// receipts/<id>.json and tells the exporters. dec is what Decide returned (nil: no
// policy was evaluated). A malformed event, outcome or decision is an *InputError; a
// log that would not take the leaf is a *LogError, and then nothing is written.
func (is *Issuer) Record(ctx context.Context, ev ToolEvent, out Outcome, dec *PolicyDecision) (*Receipt, error) {
	if err := ev.Validate("event"); err != nil {
		return nil, err
	}
	if err := out.Validate(); err != nil {
		return nil, err
	}
	var pol *receipt.Policy
	if dec != nil {
		if err := validateDecision(dec); err != nil {
			return nil, err
		}
		if err := consistent(dec, out); err != nil {
			return nil, err
		}
		pol = &receipt.Policy{Decision: dec.Decision, Reasons: nonNil(dec.Reasons), Errors: nonNil(dec.Errors), PolicyDigest: dec.PolicyDigest, Provenance: receipt.Claimed}
	}
	call := receipt.Call{
		Principal: receipt.Principal{ID: is.principal, Provenance: receipt.Claimed},
		Agent:     receipt.Agent{ID: is.agentID, Provenance: receipt.Claimed},
		Session:   receipt.Session{Provenance: receipt.Claimed},
		Model:     receipt.Model{ID: ev.Model, Provenance: receipt.Claimed},
		Tool:      receipt.Tool{Name: ev.Tool, Provenance: receipt.Claimed, DefinitionDigest: ev.DefinitionDigest},
		Args:      ev.Args,
		Policy:    pol,
	}
	if ev.Session != nil {
		call.Session.ID, call.Session.ToolUseID = ev.Session.ID, ev.Session.ToolUseID
	}
	p, err := is.core.Begin(call)
	if err != nil {
		return nil, inputErr("event.args: %v", err)
	}
	exec := receipt.Execution{Status: out.Status, Provenance: receipt.Claimed}
	switch out.Status {
	case receipt.StatusExecuted, receipt.StatusFailed:
		exec.Result = out.Result
	case receipt.StatusDenied:
		exec.Reason = out.Reason
	case receipt.StatusError:
		exec.Error = out.Error
	}
	b, err := is.core.Finish(ctx, p, exec)
	if err != nil {
		if errors.Is(err, receipt.ErrLogRefused) || errors.Is(err, receipt.ErrLogUnavailable) {
			return nil, &LogError{Log: is.logInfo, Err: err}
		}
		return nil, err
	}
	if is.sink != nil {
		is.sink.Export(ctx, b)
	}
	return &Receipt{ID: p.ReceiptID, Path: filepath.Join(is.dir, p.ReceiptID+".json"), Bundle: b}, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// consistent applies SPEC.md's consistency rules, which the verifier checks ("policy
// decision consistent with execution", "no policy errors on an allow"): an allow never
// pairs with denied, a deny always does, and an allow carries no evaluation errors. A
// receipt breaking them would be signed and logged and then fail verification, so the
// input is refused instead.
func consistent(d *PolicyDecision, out Outcome) error {
	switch {
	case d.Decision == policy.Deny && out.Status != receipt.StatusDenied:
		return inputErr("outcome.status %s with policy.decision deny: a denied call was not run, so record it as {status: denied, reason} (a receipt pairing a deny with %s fails verification)", out.Status, out.Status)
	case d.Decision == policy.Allow && out.Status == receipt.StatusDenied:
		return inputErr("outcome.status denied with policy.decision allow: a call the policy allowed was not denied by it; record what happened (executed, failed or error), or the deny that stopped it")
	case d.Decision == policy.Allow && len(d.Errors) > 0:
		return inputErr("policy.decision allow with errors %q: an evaluation error is a deny", d.Errors)
	}
	return nil
}
