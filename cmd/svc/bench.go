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
	"runtime/pprof"
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

Examples:
  svc bench append --embedded --via http,nats --clients 64 --duration 20s
  svc bench append --embedded --via http --rate 10000 --clients 256 --duration 20s
  svc bench append --url http://127.0.0.1:8080 --token-env SVC_LOG_TOKEN --count 100000`

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
	natsURL := fs.String("nats-url", "", "NATS `URL` the log listens on (svc log --nats-listen)")
	embedded := fs.Bool("embedded", false, "start a complete log service in a temporary directory and load it")
	via := fs.String("via", "http", "`transports` to load, comma-separated: http, nats")
	tenant := fs.String("tenant", "default", "the `tenant` (NATS)")
	tokenEnv := fs.String("token-env", "", "environment `variable` holding the bearer token")
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
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	targets := 0
	for _, b := range []bool{*url != "", *natsURL != "", *embedded} {
		if b {
			targets++
		}
	}
	if *embedded && targets > 1 || targets == 0 {
		return usagef("give --embedded, or --url and/or --nats-url")
	}
	token := ""
	if *tokenEnv != "" {
		token = os.Getenv(*tokenEnv)
		if token == "" {
			return fmt.Errorf("environment variable %s (named by --token-env) is not set", *tokenEnv)
		}
	}
	keys, err := signer.LoadPublicKeys(logKeys)
	if err != nil {
		return err
	}
	var nc *nats.Conn
	var prove func(o, n uint64) ([]merkle.Hash, error)
	if *embedded {
		dir, err := os.MkdirTemp("", "svc-bench-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		key, err := signer.GenerateKey()
		if err != nil {
			return err
		}
		keys = []signer.PublicKey{key.Public()}
		svc, err := logservice.Start(ctx, logservice.Config{
			DataDir: dir, Signer: receipt.KeySigner{Key: key},
			Keys:    func(context.Context) (*signer.KeyDocument, error) { return nil, fmt.Errorf("unused") },
			Tenants: []logservice.TenantSpec{{ID: *tenant, File: filepath.Join(dir, "log.jsonl")}},
			Logger:  slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil {
			return err
		}
		defer svc.Close()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		hs := &http.Server{Handler: svc.Handler()}
		go hs.Serve(ln)
		defer hs.Close()
		base := "http://" + ln.Addr().String()
		if *tenant != "default" {
			base += "/t/" + *tenant
		}
		*url = base
		nc = svc.Conn()
		prove = svc.Sequencer(*tenant).Tree().ConsistencyProof
		fmt.Fprintf(stderr, "embedded log service in %s, HTTP on %s (fsync on)\n", dir, base)
	} else if *natsURL != "" {
		if nc, err = nats.Connect(*natsURL, nats.Name("svc-bench")); err != nil {
			return fmt.Errorf("connect to %s: %w", *natsURL, err)
		}
		defer nc.Close()
	}
	if *url != "" && prove == nil {
		s, err := client.NewLogServer(*url)
		if err != nil {
			return usagef("%v", err)
		}
		prove = s.Consistency
		if len(keys) == 0 {
			if keys, err = s.Keys(ctx); err != nil {
				return err
			}
		}
	}
	var results []*bench.Result
	for _, v := range strings.Split(*via, ",") {
		var a bench.Appender
		switch strings.TrimSpace(v) {
		case "http":
			if *url == "" {
				return usagef("--via http needs --url or --embedded")
			}
			a = bench.NewHTTP(*url, token, *clients)
		case "nats":
			if nc == nil || prove == nil {
				return usagef("--via nats needs --embedded, or --nats-url with --url")
			}
			c, err := pipeline.NewClient(nc, pipeline.ClientConfig{})
			if err != nil {
				return err
			}
			defer c.Close()
			a = &bench.NATS{Client: c, Tenant: *tenant, Prove: prove}
		default:
			return usagef("--via %q: want http or nats", v)
		}
		fmt.Fprintf(stderr, "loading over %s: %d clients, %s, rate %s\n", a.Name(), *clients, *duration, rateWord(*rate))
		r, err := bench.Run(ctx, a, bench.Config{Clients: *clients, Duration: *duration, Count: *count, Rate: *rate, LeafBytes: *leafBytes, HashOnly: *hashOnly, Keys: keys, Progress: stderr})
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	if *asJSON {
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

func rateWord(r float64) string {
	if r <= 0 {
		return "max"
	}
	return fmt.Sprintf("%.0f/s", r)
}
