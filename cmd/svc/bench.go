package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"svc.dev/svc/internal/logservice"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/bench"
	"svc.dev/svc/client"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func init() {
	register("bench", "load-test a log: svc bench append", runBench)
}

const benchHelp = `Load-tests appends: N concurrent clients over HTTP (POST /append) and/or over NATS (the
pipeline's request/reply), with a progress line a second and a final table of appends/s,
p50/p95/p99 latency and errors. It checks that every returned inclusion proof verifies
against a head signed by the log's key, and that every head returned is consistent with
the last (consistency proofs from the log).

Targets: --url (a running log server; its key document is fetched unless --log-key is
given), --nats-url (a NATS the log listens on, with --url for consistency proofs), or
--embedded (a complete log service started in a temporary directory, fsync on, so one
command measures the whole stack on this machine).

With --rate the load is open-loop at that many appends/s and latency counts from each
append's scheduled time; without it every client sends as fast as answers come.

A log that takes tokens limits each one to 50 appends/s (burst 100; SPEC), so one
token measures that limit, not the server. An append refused for it (429) is counted
under "refused", not "errors"; the client waits the answer's Retry-After and sends
again, and the table ends with a warning. To measure the server over HTTP, give
several tokens of the tenant (--token-env A,B,C: appends take them in turn; each adds
50/s), load a log that takes appends without a token, or use --embedded.

Examples:
  svc bench append --embedded --via http,nats --clients 64 --duration 20s
  svc bench append --embedded --via http --rate 10000 --clients 256 --duration 20s
  svc bench append --url http://127.0.0.1:8080 --token-env SVC_LOG_TOKEN --count 100000
  svc bench append --url http://127.0.0.1:8080/t/acme --token-env TOK1,TOK2,TOK3,TOK4 --rate 180 --duration 20s`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "append" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			newFlagSet("bench append", "[flags]", benchHelp, stderr).Usage()
			return nil
		}
		return usagef("want: svc bench append [flags]")
	}
	fs := newFlagSet("bench append", "[flags]", benchHelp, stderr)
	url := fs.String("url", "", "log server base `URL` (…/t/<tenant> for a tenant)")
	var nf natsFlags
	nf.register(fs, "NATS `URL` the log listens on (svc log --nats-listen)")
	embedded := fs.Bool("embedded", false, "start a complete log service in a temporary directory and load it")
	via := fs.String("via", "http", "`transports` to load, comma-separated: http, nats")
	tenant := fs.String("tenant", "default", "the `tenant` (NATS)")
	tokenEnv := fs.String("token-env", "", "environment `variables`, comma-separated, holding bearer tokens taken in turn (each is rate limited: 50/s)")
	var logKeys listFlag
	fs.Var(&logKeys, "log-key", "trusted log public key `file`; repeatable (default: the log's key document)")
	clients := fs.Int("clients", 64, "concurrent `clients`")
	duration := fs.Duration("duration", 20*time.Second, "how long to send (`duration`)")
	count := fs.Int("count", 0, "stop after this many appends (`n`; 0: only --duration)")
	rate := fs.Float64("rate", 0, "target `appends/s` over all clients (open loop); 0: as fast as possible")
	leafBytes := fs.Int("leaf-bytes", 600, "`size` of each leaf (a receipt envelope is 2-6 KB)")
	hashOnly := fs.Bool("hash-only", false, "append leaf hashes (hash-only mode)")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (with --embedded: client and server) to `file`")
	if _, err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	targets := 0
	for _, b := range []bool{*url != "", nf.url != "", *embedded} {
		if b {
			targets++
		}
	}
	if *embedded && targets > 1 || targets == 0 {
		return usagef("give --embedded, or --url and/or --nats-url")
	}
	tokens, err := benchTokens(*tokenEnv)
	if err != nil {
		return err
	}
	keys, err := signer.LoadPublicKeys(logKeys)
	if err != nil {
		return err
	}
	t := &benchTarget{url: *url, keys: keys}
	if *embedded {
		closeLog, err := t.startEmbedded(ctx, *tenant, stderr)
		if err != nil {
			return err
		}
		defer closeLog()
	} else if nf.url != "" {
		if t.nc, err = pipeline.Connect(nf.credentials(), "svc-bench"); err != nil {
			return err
		}
		defer t.nc.Close()
	}
	if err := t.readLog(ctx); err != nil {
		return err
	}
	cfg := bench.Config{Clients: *clients, Duration: *duration, Count: *count, Rate: *rate, LeafBytes: *leafBytes, HashOnly: *hashOnly, Keys: t.keys, Progress: stderr}
	results, err := t.load(ctx, *via, *tenant, tokens, cfg, stderr)
	if err != nil {
		return err
	}
	return benchReport(stdout, results, *asJSON)
}

// benchTokens reads the bearer tokens of --token-env: comma-separated variable
// names, each required to be set.
func benchTokens(names string) ([]string, error) {
	var tokens []string
	for _, name := range strings.Split(names, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		tok, err := envValue("--token-env", name, "a bearer token of the log")
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, tok)
	}
	return tokens, nil
}

// benchReport prints the results; any error, failed proof or inconsistent head is
// exit 1.
func benchReport(stdout io.Writer, results []*bench.Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	} else {
		bench.WriteTable(stdout, results)
	}
	for _, r := range results {
		if r.Errors > 0 || !r.ProofsOK || !r.Consistent {
			return exitCode(1)
		}
	}
	return nil
}

// benchTarget is the log a bench run loads.
type benchTarget struct {
	url   string                                   // the tenant's HTTP base; empty: none
	nc    *nats.Conn                               // the broker; nil: none
	prove func(o, n uint64) ([]merkle.Hash, error) // consistency proofs of the log
	keys  []signer.PublicKey                       // the log's keys
}

// startEmbedded runs a complete log service in a temporary directory, serving HTTP on
// a free port, and returns what stops it.
func (t *benchTarget) startEmbedded(ctx context.Context, tenant string, stderr io.Writer) (func(), error) {
	dir, err := os.MkdirTemp("", "svc-bench-*")
	if err != nil {
		return nil, err
	}
	key, err := signer.GenerateKey()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	t.keys = []signer.PublicKey{key.Public()}
	svc, err := logservice.Start(ctx, logservice.Config{
		DataDir: dir, Signer: receipt.KeySigner{Key: key},
		Keys:    func(context.Context) (*signer.KeyDocument, error) { return nil, fmt.Errorf("unused") },
		Tenants: []logservice.TenantSpec{{ID: tenant, File: filepath.Join(dir, "log.jsonl")}},
		Logger:  slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	hs := &http.Server{Handler: svc.Handler()}
	go hs.Serve(ln)
	t.url = client.TenantBase("http://"+ln.Addr().String(), tenant)
	t.nc = svc.Conn()
	t.prove = svc.Sequencer(tenant).Tree().ConsistencyProof
	fmt.Fprintf(stderr, "embedded log service in %s, HTTP on %s (fsync on)\n", dir, t.url)
	return func() { hs.Close(); svc.Close(); os.RemoveAll(dir) }, nil
}

// readLog takes consistency proofs, and the keys when none were given, from the log
// server at url.
func (t *benchTarget) readLog(ctx context.Context) error {
	if t.url == "" || t.prove != nil {
		return nil
	}
	s, err := client.NewLogServer(t.url)
	if err != nil {
		return usagef("%v", err)
	}
	t.prove = s.Consistency
	if len(t.keys) == 0 {
		if t.keys, err = s.Keys(ctx); err != nil {
			return err
		}
	}
	return nil
}

// load runs one load per transport in via (comma-separated: http, nats).
func (t *benchTarget) load(ctx context.Context, via, tenant string, tokens []string, cfg bench.Config, stderr io.Writer) ([]*bench.Result, error) {
	var results []*bench.Result
	for _, v := range strings.Split(via, ",") {
		var a bench.Appender
		switch strings.TrimSpace(v) {
		case "http":
			if t.url == "" {
				return nil, usagef("--via http needs --url or --embedded")
			}
			a = bench.NewHTTP(t.url, tokens, cfg.Clients)
		case "nats":
			if t.nc == nil || t.prove == nil {
				return nil, usagef("--via nats needs --embedded, or --nats-url with --url")
			}
			c, err := pipeline.NewClient(t.nc, pipeline.ClientConfig{})
			if err != nil {
				return nil, err
			}
			defer c.Close()
			a = &bench.NATS{Client: c, Tenant: tenant, Prove: t.prove}
		default:
			return nil, usagef("--via %q: want http or nats", v)
		}
		fmt.Fprintf(stderr, "loading over %s: %d clients, %s, rate %s\n", a.Name(), cfg.Clients, cfg.Duration, rateWord(cfg.Rate))
		r, err := bench.Run(ctx, a, cfg)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	return results, nil
}

func rateWord(r float64) string {
	if r <= 0 {
		return "max"
	}
	return fmt.Sprintf("%.0f/s", r)
}
