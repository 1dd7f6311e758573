package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"svc.dev/svc/exporters"
	"svc.dev/svc/gateway/upstream"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Options are what the gateway takes besides its config file.
type Options struct {
	// LoadPolicy builds the policy evaluator from the policy text. Required.
	LoadPolicy func(text []byte) (Decider, error)
	// OnReceipt receives every receipt issued (exporters). Optional; must not block.
	OnReceipt func(*receipt.Bundle)
	Logger    *slog.Logger
	Now       func() time.Time
	// OnToolChanged is told of every tool whose definition an upstream changed after
	// the gateway logged it (a metric of the process that embeds the gateway).
	// Optional; must not block.
	OnToolChanged func(upstream, tool string)
}

// New starts the upstreams, opens the log and checks everything SPEC.md says must
// fail startup: a grant outside its window (stdio), a missing environment variable
// named for a token or a header, a tool offered by more than one upstream, both or
// neither of logFile and log, both or neither of upstream and upstreams.
func New(ctx context.Context, cfg *Config, opts Options) (*Gateway, error) {
	if opts.LoadPolicy == nil {
		return nil, errors.New("gateway: no policy loader")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	g := &Gateway{cfg: cfg, log: opts.Logger, now: opts.Now, onReceipt: opts.OnReceipt, routes: router{log: opts.Logger}}
	ok := false
	defer func() {
		if !ok {
			g.Close()
		}
	}()
	if err := g.loadKeysAndPolicy(opts.LoadPolicy); err != nil {
		return nil, err
	}
	if err := g.openIssuer(opts.Now); err != nil {
		return nil, err
	}
	// Before the tool definitions: a change seen at start (against a pin) is exported too.
	events, err := g.openExporters(ctx)
	if err != nil {
		return nil, err
	}
	g.defs = &toolDefs{issuer: g.issuer, log: g.log, now: g.now, onToolChanged: opts.OnToolChanged, events: events}
	if err := g.defs.open(cfg.ToolPins, cfg.Path(cfg.ToolPins), cfg.Path(cfg.ReceiptsDir), g.key.KeyID()); err != nil {
		return nil, err
	}
	if err := g.dialUpstreams(ctx); err != nil {
		return nil, err
	}
	for _, u := range g.routes.upstreams {
		if err := g.defs.record(ctx, u); err != nil {
			// As with receipts, a log that refuses is each call's to report; the
			// definitions are logged on a later call, once the log takes them.
			opts.Logger.Warn("tool definitions not logged at start", "upstream", u.Name(), "err", err)
		}
		g.defs.watch(u, &g.routes)
		g.relayLogs(u)
	}
	ok = true
	return g, nil
}

// loadKeysAndPolicy reads the gateway's signing key, the principals' public keys and
// the Cedar policy (whose digest every receipt records).
func (g *Gateway) loadKeysAndPolicy(load func(text []byte) (Decider, error)) error {
	cfg := g.cfg
	var err error
	if g.key, err = signer.LoadPrivateKey(cfg.Path(cfg.Identity.KeyFile)); err != nil {
		return fmt.Errorf("identity.keyFile: %w", err)
	}
	for _, p := range cfg.TrustedPrincipalKeys {
		k, err := signer.LoadPublicKey(cfg.Path(p))
		if err != nil {
			return fmt.Errorf("trustedPrincipalKeys: %w", err)
		}
		g.principalKeys = append(g.principalKeys, k)
	}
	text, err := receipt.ReadFileCapped(cfg.Path(cfg.PolicyFile), 1<<20)
	if err != nil {
		return fmt.Errorf("policyFile: %w", err)
	}
	g.policyDigest = PolicyDigest(text)
	if g.policy, err = load(text); err != nil {
		return fmt.Errorf("policyFile %s: %w", cfg.PolicyFile, err)
	}
	return nil
}

// openIssuer opens the receipt log and the issuer over it. With a local log file,
// receipt files are written behind the call (the log line is the durable record): no
// file-system metadata operation on the call's path.
func (g *Gateway) openIssuer(now func() time.Time) error {
	log, err := g.openLog()
	if err != nil {
		return err
	}
	_, local := log.(*receipt.FileLog)
	if g.issuer, err = receipt.NewIssuer(receipt.IssuerConfig{Key: g.key, Kind: receipt.KindGateway, Log: log,
		ReceiptsDir: g.cfg.Path(g.cfg.ReceiptsDir), Now: now, WriteBehind: local, Logger: g.log}); err != nil {
		return err
	}
	g.closers = append(g.closers, g.issuer.Close) // closes before the log
	return nil
}

// dialUpstreams connects every upstream and maps each tool to the one upstream that
// offers it; a tool offered twice, or a fact looked up through a tool nobody offers,
// is a configuration error.
func (g *Gateway) dialUpstreams(ctx context.Context) error {
	ups := g.cfg.Upstreams
	if g.cfg.Upstream != nil {
		ups = []UpstreamConfig{*g.cfg.Upstream}
		if ups[0].Name == "" {
			ups[0].Name = "upstream"
		}
	}
	g.multi = len(ups) > 1
	for i := range ups {
		u, err := upstream.Dial(ctx, &ups[i])
		if err != nil {
			return err
		}
		g.routes.upstreams = append(g.routes.upstreams, u)
	}
	r := g.routes.newRouting()
	if len(r.dups) > 0 {
		var dups []string
		for t, us := range r.dups {
			dups = append(dups, fmt.Sprintf("%s (offered by %s)", t, strings.Join(us, ", ")))
		}
		sort.Strings(dups)
		return fmt.Errorf("upstreams: each tool must belong to exactly one upstream: %s", strings.Join(dups, "; "))
	}
	g.routes.current.Store(r)
	for _, f := range g.cfg.Facts {
		if g.routes.ownerOf(f.Tool) == nil {
			return fmt.Errorf("facts: %s looks up tool %s, which no upstream offers", f.Name, f.Tool)
		}
	}
	return nil
}

// openExporters starts the exports of the config (its exporters.Config), if any, and
// returns the sink of tool definition changes among them (nil: none). With a log over
// NATS they are durable consumers of the receipt stream.
func (g *Gateway) openExporters(ctx context.Context) (exporters.EventSink, error) {
	ec := g.cfg.Config
	if ec.Empty() {
		return nil, nil
	}
	if err := ec.Validate(); err != nil {
		return nil, err
	}
	opts := exporters.Options{}
	if g.nc != nil {
		opts.NATS, opts.Tenant = g.nc, g.cfg.Log.Tenant
	}
	sink, err := exporters.New(ctx, ec, opts)
	if err != nil {
		return nil, err
	}
	prev := g.onReceipt
	g.onReceipt = func(b *receipt.Bundle) {
		sink.Export(context.Background(), b)
		if prev != nil {
			prev(b)
		}
	}
	g.closers = append(g.closers, func() error {
		cctx, cancel := context.WithTimeout(context.Background(), exporters.DefaultDrain)
		defer cancel()
		return sink.Close(cctx)
	})
	events, _ := sink.(exporters.EventSink)
	return events, nil
}

// openLog opens the config's log (pipeline.OpenLog). A remote log that keeps whole
// receipts is capped (capLog): a leaf over one append's cap goes by its hash.
func (g *Gateway) openLog() (receipt.Log, error) {
	c := g.cfg
	var rc *pipeline.LogConfig
	if c.Log != nil {
		rc = &c.Log.LogConfig
	}
	l, err := pipeline.OpenLog(c.Path(c.LogFile), rc, pipeline.LogOptions{Key: g.key, Name: "svc-gateway", Env: upstream.Env})
	if err != nil {
		return nil, err
	}
	g.closers = append(g.closers, l.Close)
	g.nc = l.NATS
	if l.ByHash == nil {
		return l.Log, nil
	}
	g.leafFits = l.Fits
	return &capLog{whole: l.Log, byHash: l.ByHash, fits: l.Fits, log: g.log}, nil
}

// KeyID is the gateway key's id.
func (g *Gateway) KeyID() string { return g.key.KeyID() }

// Flush waits until the receipt file of every call that has returned is written and
// on stable storage. With a local log file the files are written behind the calls (a
// moment after each returns); with a remote log, before.
func (g *Gateway) Flush() error { return g.issuer.Flush() }

// Close stops the upstreams, writes the receipt files still queued and closes the log.
func (g *Gateway) Close() error {
	var errs []error
	for _, u := range g.routes.upstreams {
		errs = append(errs, u.Close())
	}
	for i := len(g.closers) - 1; i >= 0; i-- { // the last opened closes first
		errs = append(errs, g.closers[i]())
	}
	return errors.Join(errs...)
}

// LoadGrant reads the stdio gateway's grant file.
func (c *Config) LoadGrant() (*receipt.Envelope, error) {
	if c.GrantFile == "" {
		return nil, errors.New("grantFile is required in stdio mode")
	}
	data, err := receipt.ReadFileCapped(c.Path(c.GrantFile), receipt.MaxEnvelopeSize)
	if err != nil {
		return nil, fmt.Errorf("grantFile: %w", err)
	}
	env, err := receipt.ParseEnvelope(data)
	if err != nil {
		return nil, fmt.Errorf("grantFile %s: %w", c.GrantFile, err)
	}
	return env, nil
}
