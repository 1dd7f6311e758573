package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	"svc.dev/svc/httplimits"

	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/telemetry"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/logserver"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
)

func init() {
	register("log", "run the log server (file mode, or database-backed with --db-env)", runLog)
}

const logHelp = `Runs the transparency log server. Appends go through the event-sourced pipeline: the
embedded NATS JetStream server (or --nats-url) holds the log of record, one sequencer per
tenant assigns indices and signs one head per batch, and the log file named by --file
is kept in step as a SPEC log file (svc verify --log and svc audit --log read it).

The default tenant is served at the root; --tenants adds others under /t/<tenant>/, from
a JSON file mapping a tenant id to { "file": ..., "tokenEnv": ..., "logId": ... }
(relative paths resolve against that file). With --token-env, appends and the tenant
routes need "Authorization: Bearer <token>".

Checkpoints (signed heads) are written to --checkpoint-dir every --checkpoint-every
seconds when a log grew, and re-signed every --checkpoint-heartbeat seconds when it did
not; --checkpoints-port serves that directory read-only from a second address.

With --db-env the server is database-backed (the hosted log): tenants, tokens and plans
are administrative events on the broker (svc log-admin, the admin API), PostgreSQL holds
their projections, usage, the audit trail and checkpoints, heads are signed by a separate
svc signer (--signer-url), and the admin API and page are served under /admin with the
token of --admin-token-env (at least 32 characters: openssl rand -hex 32). Any number
of such processes on one broker (--nats-url) and one database serve the same tenants;
each tenant's sequencer runs in one of them.

Each client address (an IPv6 /64) holds at most --max-conns-per-addr connections.
Behind a reverse proxy, say which X-Forwarded-For entry is the client's, for the
per-address throttles: --trusted-proxies with the proxies' addresses (safest),
--trust-proxy-hops N behind a fixed chain of N proxies that append to the header, or
--trust-proxy (the first entry) only behind a proxy that replaces the header
(docs/design/threats.md, "Behind a proxy").

The broker: --nats-listen opens the embedded server to other processes and admits only
the nkey of --nats-nkey (create the seed with svc keygen --nats-nkey <file>; give the
same file to svc log-admin and svc portal). A cluster's --nats-url logs in with the
user and password of its first URL on every node, or with --nats-nkey or --nats-creds.
A lost node, or a broker without quorum for a while, never stops the process: every
loop on the broker retries with backoff (svc_broker_retries_total; /health answers 503
"broker unavailable" while the connection is down). So does the start: the process
listens at once and, while the cluster elects or lacks a quorum, /health answers 503
"broker unavailable: starting: <step>: <error>; retrying" until it serves; a refused
configuration, JetStream disabled or a wrong password still end it. A node that has had
no JetStream quorum for 5 s (cut off from its peers) is left for another URL.

GET /metrics serves the service's metrics in Prometheus text form (append latency,
batch sizes, sequencer, projection, checkpoint, witness and export lag, refusals by
reason, requests by route and status; docs/design/telemetry.md), behind the token of
--metrics-token-env when set; a hosted log (--db-env) serves them only with that token,
since their labels name tenants. --otlp-metrics also pushes them over OTLP/HTTP. An append
carrying a sampled W3C traceparent header is traced (HTTP, broker, sequencer) to
--otlp-traces. --metrics=false turns all of it off.

Example:
  SVC_LOG_TOKEN=$(openssl rand -hex 32) svc log --file data/log.jsonl --key keys/log.key \
    --token-env SVC_LOG_TOKEN --log-id acme-prod --port 8080 --checkpoints-port 8081
  SVC_DATABASE_URL=postgres://svc@db/svc SVC_ADMIN_TOKEN=... SVC_SIGNER_TOKEN=... svc log \
    --db-env SVC_DATABASE_URL --admin-token-env SVC_ADMIN_TOKEN --signer-url http://127.0.0.1:8090 \
    --signer-token-env SVC_SIGNER_TOKEN --public-url https://log.example.com --port 8080 \
    --metrics-token-env SVC_METRICS_TOKEN --trusted-proxies 10.0.0.0/8`

// logOptions are the flags of svc log that svc up also sets.
type logOptions struct {
	file, key, tokenEnv, tenants, logID string
	signerURL, signerTokenEnv           string
	host                                string
	port, checkpointsPort               int
	data, natsListen, natsListenPWEnv   string
	nats                                natsFlags
	replicas                            int
	maxConns, maxConnsPerAddr           int
	checkpointDir                       string
	checkpointEvery, checkpointBeat     int
	logOfLogsEvery                      int // seconds; 0: no log of logs
	trustProxy                          proxyFlags
	witnesses                           listFlag
	tokenHashes                         [][32]byte  // svc up: the hash of its generated token
	waiting                             func(error) // what the start waits for (logservice.Config.Waiting)
	// The database-backed server (--db-env).
	dbEnv, adminTokenEnv      string
	publicURL, checkpointsURL string
	telemetry                 telemetryOptions
}

func (o *logOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.host, "host", "127.0.0.1", "`address` to listen on")
	fs.IntVar(&o.port, "port", 8080, "`port` of the log's routes (0: any free port)")
	fs.IntVar(&o.checkpointsPort, "checkpoints-port", -1, "`port` serving --checkpoint-dir read-only (-1: off, 0: any free port)")
	o.nats.register(fs, "an existing NATS `URL`; default: the embedded server")
	fs.StringVar(&o.natsListen, "nats-listen", "", "embedded server: also listen on `host:port` for other processes (svc log-admin, svc portal); needs --nats-nkey, the user it admits")
	fs.StringVar(&o.natsListenPWEnv, "nats-listen-password-env", "", "with --nats-listen: environment `variable` holding a password the listener also admits for user svc (gateways and SDKs, whose log.nats is nats://svc:PASSWORD@host:port)")
	fs.IntVar(&o.replicas, "replicas", 1, "stream `replicas` with --nats-url (3 in a cluster)")
	fs.IntVar(&o.maxConns, "max-conns", 1024, "HTTP connections served at `once` (1 to 65536); more wait in the kernel's queue, so set it above the producers' connection count")
	fs.IntVar(&o.maxConnsPerAddr, "max-conns-per-addr", 0, "HTTP connections one client address (IPv6: its /64) holds at `once`; one more is answered 503 (default --max-conns/16; --max-conns behind a proxy flag, whose peer is the proxy)")
	fs.StringVar(&o.checkpointDir, "checkpoint-dir", "", "`directory` for published checkpoints (default <data>/checkpoints)")
	fs.IntVar(&o.checkpointEvery, "checkpoint-every", 300, "`seconds` between checkpoints of a log that grew")
	fs.IntVar(&o.checkpointBeat, "checkpoint-heartbeat", 21600, "`seconds` after which an unchanged head is re-signed")
	o.trustProxy.register(fs)
	o.telemetry.register(fs)
	fs.IntVar(&o.logOfLogsEvery, "log-of-logs-every", 0, "with --db-env: every `seconds`, one checkpoint over all tenants' latest checkpoints is sent to the --witness-add-checkpoint witnesses (one request an interval however many tenants; a C2SP log under /log-of-logs/: checkpoint, tile/..., proof/<tenant> in tlog-proof form); 0: off")
	fs.Var(&o.witnesses, "witness-add-checkpoint", "C2SP tlog-witness base `URL` to send each signed-note checkpoint to (POST <url>/add-checkpoint); repeatable")
}

func runLog(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("log", "--file <f> --key <k> [flags]", logHelp, stderr)
	var o logOptions
	fs.StringVar(&o.file, "file", "", "the default tenant's log `file` (SPEC log file format)")
	fs.StringVar(&o.key, "key", "", "the log's private key `file` (the log signs its heads in-process)")
	fs.StringVar(&o.signerURL, "signer-url", "", "a signer service `URL` (svc signer) that signs heads instead of --key; the log server then never holds the key")
	fs.StringVar(&o.signerTokenEnv, "signer-token-env", "", "environment `variable` holding the signer's shared token (with --signer-url)")
	fs.StringVar(&o.tokenEnv, "token-env", "", "environment `variable` holding the default tenant's bearer token")
	fs.StringVar(&o.tenants, "tenants", "", "JSON `file` mapping tenant ids to {file, tokenEnv, logId}")
	fs.StringVar(&o.logID, "log-id", "", "the default tenant's log `id`, named in its heads")
	fs.StringVar(&o.data, "data", "data", "`directory` for the JetStream store, tree stores and projection state")
	fs.StringVar(&o.dbEnv, "db-env", "", "database mode: environment `variable` holding the PostgreSQL URL (tenants, tokens and plans from svc log-admin or the admin API)")
	fs.StringVar(&o.adminTokenEnv, "admin-token-env", "", "database mode: environment `variable` holding the admin token (/admin and /admin/*)")
	fs.StringVar(&o.publicURL, "public-url", "", "database mode: the log's public base `URL` (shown with new tokens)")
	fs.StringVar(&o.checkpointsURL, "checkpoints-url", "", "database mode: the public `URL` of the checkpoints host (shown by /admin/info)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the log server to `file` until it stops (performance work)")
	o.register(fs)
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	if o.dbEnv != "" {
		switch {
		case o.file != "" || o.key != "" || o.tenants != "" || o.tokenEnv != "":
			return usagef("--db-env runs the database-backed server: tenants and tokens come from the database, and heads are signed by --signer-url; drop --file, --key, --tenants and --token-env")
		case o.signerURL == "" || o.adminTokenEnv == "":
			return usagef("--db-env needs --signer-url (with --signer-token-env) and --admin-token-env")
		}
		return serveLog(ctx, o, stdout, stderr, nil)
	}
	if o.file == "" || (o.key == "") == (o.signerURL == "") {
		return usagef("--file and exactly one of --key and --signer-url are required (or --db-env for the database-backed server)")
	}
	return serveLog(ctx, o, stdout, stderr, nil)
}

type tenantFileEntry struct {
	File     string `json:"file"`
	TokenEnv string `json:"tokenEnv"`
	LogID    string `json:"logId"`
}

func tokenHashes(env string) ([][32]byte, error) {
	if env == "" {
		return nil, nil
	}
	v, ok := os.LookupEnv(env)
	if !ok || v == "" {
		return nil, fmt.Errorf("environment variable %s (named by --token-env) is not set; set it to the log's bearer token", env)
	}
	return [][32]byte{logserver.HashToken(v)}, nil
}

func loadTenants(path string) ([]logservice.TenantSpec, error) {
	data, err := receipt.ReadFileCapped(path, 1<<20)
	if err != nil {
		return nil, err
	}
	var m map[string]tenantFileEntry
	dec := json.NewDecoder(bytesReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("--tenants %s: want {\"<tenant>\": {\"file\": ..., \"tokenEnv\": ..., \"logId\": ...}}: %w", path, err)
	}
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []logservice.TenantSpec
	for _, id := range ids {
		e := m[id]
		if !client.ValidTenant(id) {
			return nil, fmt.Errorf("--tenants %s: tenant id %q: use 1 to 63 of a-z, 0-9, - and _", path, id)
		}
		if e.File == "" {
			return nil, fmt.Errorf("--tenants %s: tenant %s: file is required", path, id)
		}
		if err := client.CheckLogID(e.LogID); err != nil {
			return nil, usagef("--tenants %s: tenant %s: %s", path, id, err.Error())
		}
		if !filepath.IsAbs(e.File) {
			e.File = filepath.Join(filepath.Dir(path), e.File)
		}
		th, err := tokenHashes(e.TokenEnv)
		if err != nil {
			return nil, fmt.Errorf("--tenants %s: tenant %s: %w", path, id, err)
		}
		out = append(out, logservice.TenantSpec{ID: id, LogID: e.LogID, File: e.File, TokenHashes: th})
	}
	return out, nil
}

// serveLog runs the log service until ctx ends. ready, when set, is called with the
// listening addresses once the service answers; an error it returns stops the service.
func serveLog(ctx context.Context, o logOptions, stdout, stderr io.Writer, ready func(logAddr, cpAddr string, keyID string) error) error {
	if err := o.checkLimits(); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	headSigner, keys, err := logSigner(ctx, o)
	if err != nil {
		return err
	}
	if o.checkpointEvery <= 0 || o.checkpointBeat <= 0 {
		return usagef("--checkpoint-every and --checkpoint-heartbeat must be positive")
	}
	if o.logOfLogsEvery < 0 || (o.logOfLogsEvery > 0 && o.dbEnv == "") {
		return usagef("--log-of-logs-every takes a positive number of seconds, with --db-env (the log of logs lives in the hosted log's database)")
	}
	o.telemetry.hosted = o.dbEnv != ""
	tel, err := setupTelemetry(o.telemetry)
	if err != nil {
		return err
	}
	defer shutdownTelemetry(tel)
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, fmt.Sprint(o.port)))
	if err != nil {
		return fmt.Errorf("listen on %s:%d: %w (pick another --port)", o.host, o.port, err)
	}
	// Listening from the start: /health answers 503 with what the start waits for
	// (the broker electing, no quorum) until the service is up.
	gate := &startGate{}
	o.waiting = gate.wait
	// Headers within 10 s, a body (at most 64 KB on append) within 30 s, an answer
	// within 2 min, idle connections closed after 2 min, --max-conns connections at once.
	lim := httplimits.Default()
	lim.MaxConns, lim.MaxConnsPerAddr = o.maxConns, connShare(o.maxConns, o.maxConnsPerAddr, o.trustProxy.proxy)
	hs := lim.Server(gate)
	hs.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	errc := make(chan error, 2)
	go func() { errc <- hs.Serve(lim.Listener(ln)) }()
	defer hs.Close()
	svc, handler, names, err := startService(ctx, o, headSigner, keys, logger, tel)
	if err != nil {
		return err
	}
	defer svc.Close()
	gate.serve(withTelemetry(o.telemetry, tel, svc, handler, logger))
	cps, cpAddr, err := serveCheckpoints(o, lim, errc)
	if err != nil {
		return err
	}
	logger.Info("log server listening", "addr", ln.Addr().String(), "checkpoints", cpAddr, "keyid", headSigner.KeyID(), "tenants", names, "data", o.data)
	var runErr error
	if ready != nil {
		runErr = ready(ln.Addr().String(), cpAddr, headSigner.KeyID())
	}
	if runErr == nil {
		select {
		case <-ctx.Done():
		case runErr = <-svc.Err():
		case runErr = <-errc:
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	if cps != nil {
		_ = cps.Shutdown(sctx)
	}
	if errors.Is(runErr, http.ErrServerClosed) {
		runErr = nil
	}
	logger.Info("log server stopped")
	return runErr
}

// startService starts the log service of --db-env (hosted) or --file.
func startService(ctx context.Context, o logOptions, headSigner receipt.EnvelopeSigner, keys func(context.Context) (*signer.KeyDocument, error), logger *slog.Logger, tel *telemetry.Telemetry) (*logservice.Service, http.Handler, []string, error) {
	if o.dbEnv != "" {
		svc, handler, err := startHosted(ctx, o, headSigner, keys, logger, tel)
		return svc, handler, []string{"(from the database: svc log-admin tenant list)"}, err
	}
	svc, names, err := startFileMode(ctx, o, headSigner, keys, logger, tel)
	if err != nil {
		return nil, nil, nil, err
	}
	return svc, svc.Handler(), names, nil
}

// shutdownTelemetry pushes what OTLP has pending, within 5 s.
func shutdownTelemetry(tel *telemetry.Telemetry) {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tel.Shutdown(sctx)
}

// checkLimits checks the connection and proxy flags.
func (o *logOptions) checkLimits() error {
	if o.maxConns < 1 || o.maxConns > 65536 {
		return usagef("--max-conns %d: want 1 to 65536", o.maxConns)
	}
	if err := o.trustProxy.parse(); err != nil {
		return err
	}
	if o.maxConnsPerAddr < 0 || o.maxConnsPerAddr > o.maxConns {
		return usagef("--max-conns-per-addr %d: want 1 to --max-conns (%d)", o.maxConnsPerAddr, o.maxConns)
	}
	return nil
}

// serveCheckpoints serves the checkpoint files read-only on --checkpoints-port (none
// when it is negative), under the same bounds as the log; the server's end goes to errc.
func serveCheckpoints(o logOptions, lim httplimits.Limits, errc chan<- error) (*http.Server, string, error) {
	if o.checkpointsPort < 0 {
		return nil, "", nil
	}
	dir := o.checkpointDir
	if dir == "" {
		dir = filepath.Join(o.data, "checkpoints")
	}
	cln, err := net.Listen("tcp", net.JoinHostPort(o.host, fmt.Sprint(o.checkpointsPort)))
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s:%d for checkpoints: %w", o.host, o.checkpointsPort, err)
	}
	cps := lim.Server(readOnly(http.FileServer(filesOnly{http.Dir(dir)})))
	go func() { errc <- cps.Serve(lim.Listener(cln)) }()
	return cps, cln.Addr().String(), nil
}

// filesOnly serves files and nothing else: a directory (the root, a tenant's) is not
// found, so the checkpoints host lists no tenants.
type filesOnly struct{ fs http.FileSystem }

func (f filesOnly) Open(name string) (http.File, error) {
	file, err := f.fs.Open(name)
	if err != nil {
		return nil, err
	}
	if st, err := file.Stat(); err != nil || st.IsDir() {
		file.Close()
		return nil, fs.ErrNotExist
	}
	return file, nil
}

// readOnly allows only GET and HEAD.
func readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "read-only", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// logSigner is the head signer of svc log: the in-process key (--key) or a signer
// service (--signer-url), with the key document each publishes.
func logSigner(ctx context.Context, o logOptions) (receipt.EnvelopeSigner, func(context.Context) (*signer.KeyDocument, error), error) {
	if o.signerURL != "" {
		if o.signerTokenEnv == "" {
			return nil, nil, usagef("--signer-url needs --signer-token-env")
		}
		token, ok := os.LookupEnv(o.signerTokenEnv)
		if !ok || token == "" {
			return nil, nil, fmt.Errorf("environment variable %s (named by --signer-token-env) is not set; set it to the signer's shared token", o.signerTokenEnv)
		}
		c, err := remote.NewClient(ctx, o.signerURL, token)
		if err != nil {
			return nil, nil, fmt.Errorf("signer at %s: %w", o.signerURL, err)
		}
		return c, c.Keys, nil
	}
	key, err := signer.LoadPrivateKey(o.key)
	if err != nil {
		return nil, nil, err
	}
	validFrom := time.Now()
	if fi, err := os.Stat(o.key); err == nil {
		validFrom = fi.ModTime()
	}
	doc := &signer.KeyDocument{Keys: []signer.KeyEntry{key.Public().Entry(validFrom, nil)}}
	return receipt.KeySigner{Key: key}, func(context.Context) (*signer.KeyDocument, error) { return doc, nil }, nil
}

// commandLineActor is the audit trail's actor for the command line: user and host.
func commandLineActor() string {
	user := os.Getenv("USER")
	if user == "" {
		user = fmt.Sprintf("uid %d", os.Getuid())
	}
	host, _ := os.Hostname()
	return user + "@" + host
}

// startFileMode starts the log service of --file (and --tenants).
func startFileMode(ctx context.Context, o logOptions, headSigner receipt.EnvelopeSigner, keys func(context.Context) (*signer.KeyDocument, error), logger *slog.Logger, tel *telemetry.Telemetry) (*logservice.Service, []string, error) {
	var err error
	var noteKey *signer.Key // C2SP notes: the in-process key, or through the signer service
	if ks, ok := headSigner.(receipt.KeySigner); ok {
		noteKey = ks.Key
	}
	if err := client.CheckLogID(o.logID); err != nil {
		return nil, nil, usagef("--log-id: %s", err.Error())
	}
	th := o.tokenHashes
	if o.tokenEnv != "" {
		if th, err = tokenHashes(o.tokenEnv); err != nil {
			return nil, nil, err
		}
	}
	tenants := []logservice.TenantSpec{{ID: logserver.DefaultTenant, LogID: o.logID, File: o.file, TokenHashes: th}}
	if o.tenants != "" {
		more, err := loadTenants(o.tenants)
		if err != nil {
			return nil, nil, err
		}
		for _, t := range more {
			if t.ID == logserver.DefaultTenant {
				return nil, nil, fmt.Errorf("--tenants: %q is the tenant of --file; name the others differently", t.ID)
			}
		}
		tenants = append(tenants, more...)
	}
	listenPW, err := o.listenPassword()
	if err != nil {
		return nil, nil, err
	}
	svc, err := logservice.Start(ctx, logservice.Config{
		DataDir: o.data, NATSURL: o.nats.url, NATSCredsFile: o.nats.creds, NATSNKeyFile: o.nats.nkey, NATSListen: o.natsListen, NATSListenPassword: listenPW, Replicas: o.replicas,
		Signer: headSigner, Keys: keys,
		Tenants: tenants, CheckpointDir: o.checkpointDir,
		CheckpointEvery: time.Duration(o.checkpointEvery) * time.Second, CheckpointHeartbeat: time.Duration(o.checkpointBeat) * time.Second,
		CheckpointFirst: time.Second, // the first checkpoint follows the first append
		TrustProxy:      o.trustProxy.proxy, Logger: logger, Actor: commandLineActor(),
		NoteKey: noteKey, Witnesses: o.witnesses, Telemetry: tel, Waiting: o.waiting,
	})
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, len(tenants))
	for i, t := range tenants {
		names[i] = t.ID
	}
	return svc, names, nil
}
