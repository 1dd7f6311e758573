package main

import (
	"context"
	"io"
	"time"

	"svc.dev/svc/monitor"
)

func init() {
	register("log-check", "probe a log, its checkpoints and its witness from outside", runLogCheck)
}

const logCheckHelp = `Probes a log server from outside, with public routes and public keys only, and prints
one line per check and tenant (PASS|FAIL <tenant> <check>: <detail>), then a RESULT line:

  health                           GET <log-url>/health answers ok
  key document                     the tenant's key document parses and its keys are valid
  head signature                   the live /head is signed by a published key
  checkpoint signature             the latest checkpoint is signed by a published key
  checkpoint freshness             it was signed within --max-lag seconds when the tree grew
                                   since, within a day when it did not
  checkpoint consistent with head  the log's consistency proof to the live head verifies
  witness countersignature         (--witness-url) the witness's latest.json carries a valid
                                   signature by a key of its svc-witness.json, and its head
                                   is consistent with the live log
  no alarm                         (--witness-url) the witness has no ALARM.json
  checkpoint cosigned under policy (--policy) the tenant's C2SP checkpoint (/checkpoint)
                                   is signed by the log and cosigned by the quorum of a
                                   C2SP tlog-policy file's witnesses, and the live log
                                   extends it

The latest checkpoint is <checkpoints-url>/<tenant>/latest.json, or without
--checkpoints-url the largest one the log's /checkpoints route lists. Every fetch times
out after ten seconds. Exit 0 when every check passes, 1 on any failure. --json prints
{ "ok": bool, "checks": [{ "tenant", "name", "ok", "detail"? }] }.

Example:
  svc log-check --log-url https://log.example.com --checkpoints-url https://checkpoints.example.com \
    --witness-url https://witness.example.org --tenant default --tenant acme --max-lag 600`

func runLogCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("log-check", "--log-url <url> [--checkpoints-url <url>] [--witness-url <url>] [--tenant <name>]... [--max-lag <s>] [--json]", logCheckHelp, stderr)
	logURL := fs.String("log-url", "", "the log server's base `URL`")
	cpURL := fs.String("checkpoints-url", "", "base `URL` of the host serving the log's checkpoints (<tenant>/latest.json)")
	witnessURL := fs.String("witness-url", "", "base `URL` of a witness's published output (its --out directory)")
	var tenants listFlag
	fs.Var(&tenants, "tenant", "tenant `name` to check; repeatable (default: default)")
	maxLag := fs.Int("max-lag", 600, "`seconds` a checkpoint may lag behind a log that grew")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	policyPath := fs.String("policy", "", "C2SP tlog-policy `file`: each tenant's C2SP checkpoint (/checkpoint) must be cosigned by its quorum")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if *logURL == "" {
		return usagef("--log-url is required")
	}
	if *maxLag <= 0 {
		return usagef("--max-lag must be a positive number of seconds")
	}
	opts := monitor.Options{LogURL: *logURL, CheckpointsURL: *cpURL, WitnessURL: *witnessURL,
		Tenants: tenants, MaxLag: time.Duration(*maxLag) * time.Second}
	if *policyPath != "" {
		if opts.Policy, err = loadPolicy(*policyPath); err != nil {
			return err
		}
	}
	res, err := monitor.Run(ctx, opts)
	if err != nil {
		return usagef("%v", err)
	}
	return writeReport(stdout, res, *asJSON, res.OK)
}
