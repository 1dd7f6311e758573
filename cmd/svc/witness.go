package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/httplimits"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

func init() {
	register("witness", "countersign a log's checkpoints, or raise an alarm", runWitness)
}

const witnessHelp = `Runs a witness: every --every seconds, for each --tenant, it fetches
<checkpoints-url>/<tenant>/latest.json, verifies it against the log's published key
document (<log-url>/.well-known/svc-log.json, or <log-url>/t/<tenant>/... for a tenant),
proves with the log's /consistency route that it extends the last head this witness
signed (remembered in <out>/<tenant>/state.json, saved before countersigning), and
countersigns it: <out>/<tenant>/<treeSize>.json and latest.json carry the log's envelope
with the witness's signature added. The witness key document is written to
<out>/.well-known/svc-witness.json; serve <out> read-only so that monitors and auditors
can read it (svc log-check --witness-url, svc audit --witness-url).

A checkpoint that does not extend the signed head, a second root at the signed size, or
a checkpoint signed by a key the log does not publish writes <out>/<tenant>/ALARM.json
and ALARM-<time>.json instead, and the witness state does not move. ALARM.json stays
until removed by hand. Outbound fetches time out after ten seconds. Log lines go to
stderr.

With --listen, the witness also serves the C2SP tlog-witness protocol
(https://c2sp.org/tlog-witness) on that address: POST /add-checkpoint with an old size,
a consistency proof and a signed checkpoint note of a log named by --c2sp-log (its note
verifier key, whose name is the log's origin), answered with a tlog-cosignature/v1 line
by the cosigner --name once the checkpoint extends the last one it cosigned (state and
evidence of a second history under <out>/c2sp). So it cosigns any C2SP log (Tessera's,
Sunlight's, svc's own signed-note checkpoints). Its cosigner key (the vkey a log or a
policy names it by) is printed at start and written to <out>/c2sp/cosigner.vkey. With
--listen, --log-url and --checkpoints-url may be left out (no SPEC cycle runs).

With --once, one cycle runs and the exit status is 0 when every tenant was
countersigned or unchanged, 1 when any raised an alarm or could not be checked.

Example:
  svc witness --key keys/witness.key --log-url https://log.example.com \
    --checkpoints-url https://checkpoints.example.com --out /srv/witness --tenant default --tenant acme
  # a C2SP witness only:
  svc witness --key keys/witness.key --out /srv/witness --listen 127.0.0.1:7380 \
    --name witness.example.com/w1 --c2sp-log 'log.example.com/acme+1a2b3c4d+AQ...'`

func runWitness(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("witness", "--key <k> --log-url <url> --checkpoints-url <url> --out <dir> [--tenant <name>]... [--every <s>] [--once] [--listen <addr> --name <n> --c2sp-log <vkey>...]", witnessHelp, stderr)
	keyPath := fs.String("key", "", "the witness's private key `file` (PKCS#8 PEM)")
	logURL := fs.String("log-url", "", "the log server's base `URL` (key documents and /consistency)")
	cpURL := fs.String("checkpoints-url", "", "base `URL` of the host serving the log's checkpoints (<tenant>/latest.json)")
	out := fs.String("out", "", "output `directory`: countersigned checkpoints, state, alarms, key document")
	var tenants listFlag
	fs.Var(&tenants, "tenant", "tenant `name` to watch; repeatable (default: default)")
	every := fs.Int("every", 300, "`seconds` between cycles")
	once := fs.Bool("once", false, "run one cycle and exit: 0 when all countersigned or unchanged, 1 otherwise")
	var tl tlogFlags
	tl.register(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	cycle := *logURL != "" || *cpURL != "" || tl.listen == ""
	if *keyPath == "" || *out == "" || (cycle && (*logURL == "" || *cpURL == "")) {
		return usagef("--key, --log-url, --checkpoints-url and --out are required (--log-url and --checkpoints-url may be left out with --listen)")
	}
	if err := tl.check(); err != nil {
		return err
	}
	if *every <= 0 {
		return usagef("--every must be a positive number of seconds")
	}
	if err := checkWitnessURLs(cycle, *logURL, *cpURL); err != nil {
		return err
	}
	key, err := signer.LoadPrivateKey(*keyPath)
	if err != nil {
		return err
	}
	validFrom := time.Now()
	if fi, err := os.Stat(*keyPath); err == nil {
		validFrom = fi.ModTime()
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if tl.listen != "" {
		stop, err := tl.serve(ctx, key, filepath.Join(*out, "c2sp"), stdout, logger)
		if err != nil {
			return err
		}
		defer stop()
		if !cycle {
			<-ctx.Done()
			return nil
		}
	}
	w, err := witness.New(witness.Config{Key: key, KeyValidFrom: validFrom, LogURL: *logURL, CheckpointsURL: *cpURL, Out: *out,
		Tenants: tenants, Logger: logger})
	if err != nil {
		return err
	}
	defer w.Close()
	logger.Info("witness started", "keyid", key.KeyID(), "log", *logURL, "checkpoints", *cpURL, "out", *out, "tenants", []string(tenants), "once", *once)
	if *once {
		failed := 0
		for _, r := range w.Cycle(ctx) {
			if !r.OK() {
				failed++
			}
		}
		if failed > 0 {
			return exitCode(1)
		}
		return nil
	}
	err = w.Run(ctx, time.Duration(*every)*time.Second)
	logger.Info("witness stopped")
	return err
}

func checkWitnessURLs(cycle bool, logURL, cpURL string) error {
	if !cycle {
		return nil
	}
	if _, err := client.CheckBaseURL("--log-url", logURL); err != nil {
		return usagef("%v", err)
	}
	if _, err := client.CheckBaseURL("--checkpoints-url", cpURL); err != nil {
		return usagef("%v", err)
	}
	return nil
}

// tlogFlags are the C2SP tlog-witness flags of svc witness.
type tlogFlags struct {
	listen string
	name   string
	logs   listFlag
}

func (t *tlogFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.listen, "listen", "", "also serve C2SP tlog-witness (POST /add-checkpoint) on this `address` (host:port)")
	fs.StringVar(&t.name, "name", "", "the cosigner `name` of the C2SP witness, a schema-less URL (required with --listen)")
	fs.Var(&t.logs, "c2sp-log", "note verifier `key` of a C2SP log to cosign (its name is the log's origin); repeatable")
}

func (t *tlogFlags) check() error {
	switch {
	case t.listen == "" && (t.name != "" || len(t.logs) > 0):
		return usagef("--name and --c2sp-log need --listen (the address of the C2SP witness)")
	case t.listen != "" && (t.name == "" || len(t.logs) == 0):
		return usagef("--listen needs --name (the cosigner name) and at least one --c2sp-log (a log's note verifier key)")
	}
	return nil
}

// serve starts the C2SP witness on t.listen; stop shuts it down.
func (t *tlogFlags) serve(ctx context.Context, key *signer.Key, dir string, stdout io.Writer, logger *slog.Logger) (stop func(), err error) {
	tw, err := witness.NewTlogWitness(witness.TlogConfig{Key: key, Name: t.name, Logs: t.logs, Dir: dir, Logger: logger})
	if err != nil {
		return nil, usagef("%v", err)
	}
	if err := receipt.WriteFileAtomic(filepath.Join(dir, "cosigner.vkey"), []byte(tw.VerifierKey()+"\n"), 0o644); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", t.listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", t.listen, err)
	}
	lim := httplimits.Limits{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 10 * time.Second, Idle: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
	hs := lim.Server(tw)
	hs.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	go func() {
		if err := hs.Serve(lim.Listener(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("C2SP witness stopped serving", "err", err)
		}
	}()
	fmt.Fprintf(stdout, "C2SP witness on http://%s/add-checkpoint cosigner key %s\n", ln.Addr(), tw.VerifierKey())
	logger.Info("C2SP witness started", "addr", ln.Addr().String(), "cosigner", tw.VerifierKey(), "logs", len(t.logs))
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}, nil
}
