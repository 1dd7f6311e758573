package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"svc.dev/svc/client"
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

With --once, one cycle runs and the exit status is 0 when every tenant was
countersigned or unchanged, 1 when any raised an alarm or could not be checked.

Example:
  svc witness --key keys/witness.key --log-url https://log.example.com \
    --checkpoints-url https://checkpoints.example.com --out /srv/witness --tenant default --tenant acme`

func runWitness(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("witness", "--key <k> --log-url <url> --checkpoints-url <url> --out <dir> [--tenant <name>]... [--every <s>] [--once]", witnessHelp, stderr)
	keyPath := fs.String("key", "", "the witness's private key `file` (PKCS#8 PEM)")
	logURL := fs.String("log-url", "", "the log server's base `URL` (key documents and /consistency)")
	cpURL := fs.String("checkpoints-url", "", "base `URL` of the host serving the log's checkpoints (<tenant>/latest.json)")
	out := fs.String("out", "", "output `directory`: countersigned checkpoints, state, alarms, key document")
	var tenants listFlag
	fs.Var(&tenants, "tenant", "tenant `name` to watch; repeatable (default: default)")
	every := fs.Int("every", 300, "`seconds` between cycles")
	once := fs.Bool("once", false, "run one cycle and exit: 0 when all countersigned or unchanged, 1 otherwise")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if *keyPath == "" || *logURL == "" || *cpURL == "" || *out == "" {
		return usagef("--key, --log-url, --checkpoints-url and --out are required")
	}
	if *every <= 0 {
		return usagef("--every must be a positive number of seconds")
	}
	if _, err := client.CheckBaseURL("--log-url", *logURL); err != nil {
		return usagef("%v", err)
	}
	if _, err := client.CheckBaseURL("--checkpoints-url", *cpURL); err != nil {
		return usagef("%v", err)
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
