package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/httplimits"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/portal"
)

func init() {
	register("portal", "run the self-serve portal of the hosted log: registration, keys, dashboard, billing", runPortal)
}

const portalHelp = `Runs the portal of the database-backed log (svc log --db-env): people register a
tenant and get its first API key, log in, create and revoke keys, see usage against
their plan's quota, the tree, checkpoints and audit trail, copy the export command,
and upgrade to the team plan through the payment provider (Stripe). Tenants, keys and
plans change through the same administrative events as svc log-admin (audit actor
portal:<email>); accounts and sessions are rows of the same PostgreSQL database.

It reaches the log servers' broker at --nats-url.
` + natsCredentialsHelp + `The session cookie is signed with
the secret in --secret-env (at least 32 bytes; e.g. openssl rand -hex 32) and is
Secure when --public-url or --portal-url is https. Billing is on when
--stripe-secret-env, --stripe-webhook-secret-env, --stripe-price and --portal-url are
given; the provider then sends its events to <portal-url>/stripe/webhook. Only a paid
checkout moves a tenant to team (checkout.session.completed with payment_status paid,
or checkout.session.async_payment_succeeded).

Bounds: registrations 5 per address then one an hour, logins 10 per address then one
per 6 s (429 with Retry-After). Password hashing (scrypt, 32 MiB each) runs at most
--max-hashing at once across all addresses (default 4: 128 MiB); a login or
registration waits up to 2 s for a slot, then gets 503 with Retry-After: 1. A tenant
holds at most 25 live API keys (409 beyond: revoke one) and creates at most 5, then
one a minute (429).

Registrations are throttled per client address (5, then one an hour) and so are
logins (10, then one every 6 s), as SPEC requires. Testing locally, where every
attempt comes from 127.0.0.1, --no-throttle turns both off; it refuses to start
unless --host, --public-url and --portal-url are all loopback addresses.

Example:
  export SVC_DATABASE_URL=postgres://svc@db/svc SVC_PORTAL_SECRET=$(openssl rand -hex 32)
  svc portal --db-env SVC_DATABASE_URL --nats-url nats://127.0.0.1:4222 --nats-nkey data/nats.nk \
    --secret-env SVC_PORTAL_SECRET --public-url https://log.example.com \
    --portal-url https://portal.example.com --port 8070`

type portalOptions struct {
	controlPlaneFlags
	secretEnv                          string
	publicURL, checkpointsURL, portURL string
	logURL                             string
	host                               string
	port                               int
	trustProxy                         proxyFlags
	noThrottle                         bool
	maxHashing                         int
	stripeKeyEnv, stripeHookEnv, price string
	stripeAPI                          string
}

func runPortal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return servePortal(ctx, args, stderr, nil)
}

// portalFlags parses svc portal's flags.
func portalFlags(args []string, stderr io.Writer) (portalOptions, error) {
	fs := newFlagSet("portal", "--db-env <ENV> --nats-url <URL> --secret-env <ENV> --public-url <URL> [--checkpoints-url <URL>] [--portal-url <URL>] [billing options] [--trust-proxy | --trust-proxy-hops N | --trusted-proxies <addrs>]", portalHelp, stderr)
	var o portalOptions
	o.controlPlaneFlags.register(fs, "environment `variable` holding the PostgreSQL URL of the log's database (required)")
	fs.StringVar(&o.secretEnv, "secret-env", "", "environment `variable` holding the session cookie secret, at least 32 bytes (required)")
	fs.StringVar(&o.publicURL, "public-url", "", "the log's public base `URL` (required): shown to tenants, used by the export command")
	fs.StringVar(&o.logURL, "log-url", "", "`URL` where this process reads the log's head (default --public-url)")
	fs.StringVar(&o.checkpointsURL, "checkpoints-url", "", "the public `URL` of the checkpoints host")
	fs.StringVar(&o.portURL, "portal-url", "", "the portal's own public `URL`, where billing returns the browser (required with billing)")
	fs.StringVar(&o.host, "host", "127.0.0.1", "`address` to listen on")
	fs.IntVar(&o.port, "port", 8070, "`port` to listen on (0: any free port)")
	fs.IntVar(&o.maxHashing, "max-hashing", portal.DefaultMaxHashing, "password hashes computed at `once` (32 MiB each); more wait up to 2 s, then 503")
	o.trustProxy.register(fs)
	fs.BoolVar(&o.noThrottle, "no-throttle", false, "local testing: no registration or login throttle per address; refused unless --host, --public-url and --portal-url are loopback")
	fs.StringVar(&o.stripeKeyEnv, "stripe-secret-env", "", "billing: environment `variable` holding the Stripe API key")
	fs.StringVar(&o.stripeHookEnv, "stripe-webhook-secret-env", "", "billing: environment `variable` holding the Stripe webhook signing secret")
	fs.StringVar(&o.price, "stripe-price", "", "billing: the Stripe price `id` of the team plan")
	fs.StringVar(&o.stripeAPI, "stripe-api-url", "", "billing: the Stripe API base `URL` (default Stripe's; stripe-mock in tests)")
	if _, err := parseFlags(fs, args); err != nil {
		return o, err
	}
	return o, o.trustProxy.parse()
}

// servePortal runs the portal until ctx ends; ready, when set, is called with the
// address it listens on.
func servePortal(ctx context.Context, args []string, stderr io.Writer, ready func(addr string)) error {
	o, err := portalFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.dbEnv == "" || o.nats.url == "" || o.secretEnv == "" || o.publicURL == "" {
		return usagef("--db-env, --nats-url, --secret-env and --public-url are required")
	}
	if o.noThrottle && !httplimits.LoopbackHost(o.host) {
		return usagef("--no-throttle is for local testing: --host %q is not a loopback address", o.host)
	}
	secret, err := envValue("--secret-env", o.secretEnv, "a secret of at least 32 bytes (openssl rand -hex 32)")
	if err != nil {
		return err
	}
	bill, err := portalBilling(o)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	errc := make(chan error, 2)
	cp, err := o.attach(ctx, "svc-portal", logger, errc)
	if err != nil {
		return err
	}
	defer cp.Close()
	st, js, view := cp.st, cp.js, cp.view
	p, err := portal.New(portal.Config{
		Admin: &tenancy.Admin{JS: js, View: view}, View: view, JS: js, Store: st, Secret: []byte(secret),
		PublicURL: o.publicURL, SvcCommand: selfCommand(), LogURL: o.logURL, CheckpointsURL: o.checkpointsURL, PortalURL: o.portURL,
		Billing: bill, TrustProxy: o.trustProxy.proxy, NoThrottle: o.noThrottle, MaxHashing: o.maxHashing, Logger: logger,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, fmt.Sprint(o.port)))
	if err != nil {
		return fmt.Errorf("listen on %s:%d: %w (pick another --port)", o.host, o.port, err)
	}
	// Headers within 10 s, a body (at most 8 KiB, 256 KiB for the webhook) within
	// 30 s, an answer within 2 min, idle connections closed after 2 min.
	lim := httplimits.Default()
	lim.MaxConnsPerAddr = connShare(lim.MaxConns, 0, o.trustProxy.proxy)
	hs := lim.Server(p)
	hs.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	go func() { errc <- hs.Serve(lim.Listener(ln)) }()
	logger.Info("portal listening", "addr", ln.Addr().String(), "public", o.publicURL, "billing", bill != nil)
	if o.noThrottle {
		logger.Warn("registration and login throttles are off (--no-throttle): local testing only")
	}
	if ready != nil {
		ready(ln.Addr().String())
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = hs.Shutdown(sctx)
	if errors.Is(runErr, http.ErrServerClosed) {
		runErr = nil
	}
	logger.Info("portal stopped")
	return runErr
}

// portalBilling reads the billing options: all of them or none.
func portalBilling(o portalOptions) (*portal.Billing, error) {
	if o.stripeKeyEnv == "" && o.stripeHookEnv == "" && o.price == "" {
		return nil, nil
	}
	if o.stripeKeyEnv == "" || o.stripeHookEnv == "" || o.price == "" {
		return nil, usagef("billing needs all of --stripe-secret-env, --stripe-webhook-secret-env and --stripe-price")
	}
	key, err := envValue("--stripe-secret-env", o.stripeKeyEnv, "the Stripe API key (sk_...)")
	if err != nil {
		return nil, err
	}
	hook, err := envValue("--stripe-webhook-secret-env", o.stripeHookEnv, "the Stripe webhook signing secret (whsec_...)")
	if err != nil {
		return nil, err
	}
	return &portal.Billing{SecretKey: key, WebhookSecret: hook, TeamPrice: o.price, APIURL: o.stripeAPI}, nil
}

// controlPlane is what svc portal and svc log-admin attach to: the log's database, its
// broker (with the pipeline's streams) and a tenancy view that follows it.
type controlPlane struct {
	st     *store.Store
	nc     *nats.Conn
	js     jetstream.JetStream
	view   *tenancy.View
	cancel context.CancelFunc
}

// attachControlPlane opens the database of dbEnv, connects to the broker as name and
// starts a tenancy view (logging to logger, which may be nil; its errors go to errc,
// which may be nil). Close undoes it.
func attachControlPlane(ctx context.Context, dbEnv string, creds pipeline.Credentials, name string, logger *slog.Logger, errc chan<- error) (*controlPlane, error) {
	st, err := openStore(ctx, dbEnv)
	if err != nil {
		return nil, err
	}
	js, nc, err := connectBroker(ctx, creds, name)
	if err != nil {
		st.Close()
		return nil, err
	}
	vctx, cancel := context.WithCancel(ctx)
	cp := &controlPlane{st: st, nc: nc, js: js, view: tenancy.NewView(js, logger, nil), cancel: cancel}
	if err := cp.view.Start(vctx, errc); err != nil {
		cp.Close()
		return nil, err
	}
	return cp, nil
}

// Close stops the view and closes the broker connection and the database.
func (cp *controlPlane) Close() {
	cp.cancel()
	cp.nc.Close()
	cp.st.Close()
}

// connectBroker connects to the log servers' broker and makes sure the pipeline's
// streams exist.
func connectBroker(ctx context.Context, c pipeline.Credentials, name string) (jetstream.JetStream, *nats.Conn, error) {
	nc, err := pipeline.Connect(c, name)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (is the log server running with --nats-url, or --nats-listen and --nats-nkey, whose seed file to give here?)", err)
	}
	js, err := jetstream.New(nc)
	if err == nil {
		err = pipeline.EnsureStreams(ctx, js, pipeline.StreamConfig{})
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc, nil
}
