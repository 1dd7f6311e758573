package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"svc.dev/svc/client"
	"svc.dev/svc/conformance"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func init() {
	register("verify", "verify a receipt bundle, or many (files, directories, - for a list), with public keys only", runVerify)
}

const verifyHelp = `Verifies a receipt bundle (receipts/<id>.json) using public keys only, running every
check of the verification procedure in order. Prints PASS/FAIL lines, the RESULT line,
the ISSUER line (a gateway enforces outside the agent's process; an SDK self-reports) and
the fields with their provenance. Exit 0 when every check passes, 1 otherwise.

Key flags may repeat (rotation). --principal-key may be omitted for SDK receipts.
With --log-url and no --log-key, the log's published key document is trusted for heads.

A gateway receipt whose tool cites a definition (tool.definitionDigest) is checked
against the tool-definitions statements the gateway logged (*.tools.json beside the
receipts, or --tool-definitions): "tool definition logged" and "tool definition
logged before the call".

Many bundles (an audit): give several files, a directory (walked recursively for *.json,
leaving out *.authorization.json, *.tools.json and hidden files), or - to read one path a line from
stdin. Every core verifies; grants, delegation chains and tree heads are checked once
and remembered by digest. A failed bundle prints a FAIL line with its first failing
check; then one summary (verified, failed by first failing check, by issuer kind, tool,
execution status, provenance of the execution and agent) and the RESULT line. With
--json: one JSON line per bundle, then {"summary": ...}. --html writes the same summary
as a self-contained page with a table of failures. A progress line is shown on stderr
when it is a terminal. Exit 0 when every bundle verifies, 1 otherwise.

--checkpoint ties every receipt to one witnessed state of the log: its tree head must
be consistent with the checkpoint (a file or URL in any checkpoint form), which must be
countersigned by a --witness-key (or a key of --witness-url); consistency proofs, one per
distinct head size, come from --log-url or are computed from --log. With --policy (a C2SP
tlog-policy file: logs, witnesses, groups and a quorum) the checkpoint is a C2SP signed
note (a tenant's /checkpoint with its witnesses' cosignature lines), signed by a log of
the policy or a --log-key, and cosigned by the policy's quorum.

Examples:
  svc verify receipts/1b4e....json --issuer-key keys/gateway.pub --principal-key keys/alice.pub --log data/receipts.log
  svc verify receipts/ --issuer-key keys/gateway.pub --principal-key keys/alice.pub --log-key keys/log.pub \
      --checkpoint https://witness.example/default/latest.json --witness-key keys/witness.pub --log-url https://log.example \
      --html audit.html
  find receipts -name '*.json' -newer last-audit | svc verify - --issuer-key keys/gateway.pub --json`

func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("verify", "<bundle> --issuer-key <pub> [--principal-key <pub>] [flags]", verifyHelp, stderr)
	var issuerKeys, principalKeys, logKeys, upstreamKeys listFlag
	fs.Var(&issuerKeys, "issuer-key", "trusted issuer (gateway or SDK) public key `file`; repeatable")
	fs.Var(&issuerKeys, "gateway-key", "alias of --issuer-key")
	fs.Var(&principalKeys, "principal-key", "trusted principal public key `file` (gateway receipts); repeatable")
	fs.Var(&logKeys, "log-key", "trusted log public key `file`, for heads signed by a remote log; repeatable")
	fs.Var(&upstreamKeys, "upstream-key", "public key `file` of an upstream that signs its results; repeatable")
	logFile := fs.String("log", "", "a copy of the log `file`; its root at the head's size must match")
	logURL := fs.String("log-url", "", "log server base `URL` (…/t/<tenant> for a tenant); its root at the head's size must match")
	logID := fs.String("log-id", "", "the log `id` the tree head must name")
	stripeEnv := fs.String("stripe-secret-env", "", "environment `variable` holding the payment-webhook signing secret")
	githubEnv := fs.String("github-secret-env", "", "environment `variable` holding the repo-delivery webhook secret")
	var witnessKeys listFlag
	fs.Var(&witnessKeys, "witness-key", "trusted witness public key `file`; repeatable: the head must be countersigned by a witness")
	witnessURL := fs.String("witness-url", "", "witness output base `URL`: its key document and latest countersigned checkpoint (needs --log-url to prove consistency)")
	tenant := fs.String("tenant", "default", "the `tenant` under the witness URL")
	asJSON := fs.Bool("json", false, "print the report as one JSON object; over many bundles, one JSON line per bundle and then the summary")
	checkpoint := fs.String("checkpoint", "", "checkpoint `file or URL` every receipt's head must be consistent with (needs --witness-key, --witness-url or --policy)")
	policy := fs.String("policy", "", "C2SP tlog-policy `file`: --checkpoint is a C2SP signed note that its witnesses must have cosigned to its quorum")
	htmlOut := fs.String("html", "", "write an HTML report of the batch to `file`")
	var toolDefs listFlag
	fs.Var(&toolDefs, "tool-definitions", "tool-definitions statement `file or directory` (*.tools.json) that receipts citing a tool definition are checked against; repeatable; default: the *.tools.json beside the bundles")
	workers := fs.Int("workers", 0, "bundles verified at once over many bundles (`n`, 0: one per core)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("want a bundle file, a directory of bundles or - (paths on stdin)")
	}
	if len(issuerKeys) == 0 {
		return usagef("--issuer-key is required (the gateway's or SDK's public key)")
	}
	opts := conformance.Options{ProviderSecrets: map[string][]byte{}, LogID: *logID}
	if err := verifyKeys(&opts, issuerKeys, principalKeys, logKeys, upstreamKeys, *stripeEnv, *githubEnv); err != nil {
		return err
	}
	notes, err := verifyLogCopy(ctx, &opts, *logFile, *logURL)
	if err != nil {
		return err
	}
	if opts.WitnessKeys, err = signer.LoadPublicKeys(witnessKeys); err != nil {
		return err
	}
	if *witnessURL != "" {
		if err := loadVerifyWitness(ctx, *witnessURL, *tenant, &opts); err != nil {
			return err
		}
		if s, ok := opts.Log.(*client.LogServer); ok {
			opts.WitnessLog = s
		}
	}
	switch {
	case *policy != "" && *checkpoint == "":
		return usagef("--policy needs --checkpoint (a C2SP checkpoint cosigned by the policy's witnesses)")
	case *policy != "":
		err = loadCosignedCheckpoint(ctx, *checkpoint, *policy, &opts)
	case *checkpoint != "":
		err = loadCheckpoint(ctx, *checkpoint, &opts)
	}
	if err != nil {
		return err
	}
	if opts.ToolDefinitions, err = loadToolDefinitions(toolDefs, pos); err != nil {
		return err
	}
	if b := (batchRun{paths: pos, json: *asJSON, html: *htmlOut, workers: *workers, checkpoint: *checkpoint}); b.isBatch() {
		return b.run(ctx, opts, notes, stdout, stderr)
	}
	data, err := receipt.ReadFileCapped(pos[0], receipt.MaxBundleSize)
	if err != nil {
		return err
	}
	rep := conformance.VerifyBytes(data, opts)
	rep.Notes = append(rep.Notes, notes...)
	return writeReport(stdout, rep, *asJSON, rep.Verified)
}

// verifyKeys loads the trusted keys of the flags and the provider secrets their
// environment variables hold into opts.
func verifyKeys(opts *conformance.Options, issuer, principal, log, upstream []string, stripeEnv, githubEnv string) error {
	var err error
	for _, load := range []struct {
		files []string
		into  *[]signer.PublicKey
	}{{issuer, &opts.IssuerKeys}, {principal, &opts.PrincipalKeys}, {log, &opts.LogKeys}, {upstream, &opts.UpstreamKeys}} {
		if *load.into, err = signer.LoadPublicKeys(load.files); err != nil {
			return err
		}
	}
	for env, provider := range map[string]string{stripeEnv: receipt.ProviderPaymentWebhook, githubEnv: receipt.ProviderRepoDelivery} {
		if env == "" {
			continue
		}
		v, ok := os.LookupEnv(env)
		if !ok || v == "" {
			return fmt.Errorf("environment variable %s (the %s secret) is not set", env, provider)
		}
		opts.ProviderSecrets[provider] = []byte(v)
	}
	return nil
}

// verifyLogCopy sets the copy of the log the heads are checked against: a log file
// (--log) or a log server (--log-url, whose published keys are trusted when no
// --log-key was given, which the returned note says).
func verifyLogCopy(ctx context.Context, opts *conformance.Options, logFile, logURL string) ([]string, error) {
	switch {
	case logFile != "" && logURL != "":
		return nil, usagef("give --log or --log-url, not both")
	case logFile != "":
		c, err := conformance.OpenFileCopy(logFile)
		if err != nil {
			return nil, err
		}
		opts.Log = c
	case logURL != "":
		s, err := client.NewLogServer(logURL)
		if err != nil {
			return nil, usagef("%v", err)
		}
		opts.Log = s
		if len(opts.LogKeys) == 0 {
			keys, err := s.Keys(ctx)
			if err != nil {
				return nil, err
			}
			opts.LogKeys = keys
			return []string{"log keys were taken from " + s.Base + "/.well-known/svc-log.json; pass --log-key to pin them"}, nil
		}
	}
	return nil, nil
}

// loadVerifyWitness fetches the witness's key document (unless keys were given) and
// its latest countersigned checkpoint for tenant.
func loadVerifyWitness(ctx context.Context, base, tenant string, opts *conformance.Options) error {
	base = strings.TrimRight(base, "/")
	var err error
	if opts.WitnessKeys, err = witnessKeys(ctx, base, opts.WitnessKeys); err != nil {
		return err
	}
	if opts.WitnessHead, err = witnessCheckpoint(ctx, client.LatestCheckpointURL(base, tenant)); err != nil {
		return fmt.Errorf("witness checkpoint: %w", err)
	}
	return nil
}

// witnessKeys is keys when some were given, else the keys of the witness's key
// document at base.
func witnessKeys(ctx context.Context, base string, keys []signer.PublicKey) ([]signer.PublicKey, error) {
	if len(keys) > 0 {
		return keys, nil
	}
	return client.WitnessKeys(ctx, base)
}

// witnessCheckpoint is the envelope of the witness's published checkpoint at u
// (client.CheckpointURL, client.LatestCheckpointURL).
func witnessCheckpoint(ctx context.Context, u string) (*receipt.Envelope, error) {
	var cp struct {
		Envelope *receipt.Envelope `json:"envelope"`
	}
	if err := client.GetJSON(ctx, nil, u, &cp); err != nil {
		return nil, err
	}
	return cp.Envelope, nil
}

// loadToolDefinitions reads the tool-definitions statements of --tool-definitions
// (files, or directories' *.tools.json), or without it those beside the bundles: in
// each directory given, and in the directory of each file given.
func loadToolDefinitions(given, bundles []string) ([]*receipt.Bundle, error) {
	explicit := len(given) > 0
	if !explicit {
		for _, p := range bundles {
			if p == "-" {
				continue
			}
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				p = filepath.Dir(p)
			}
			if !slices.Contains(given, p) {
				given = append(given, p)
			}
		}
	}
	var out []*receipt.Bundle
	for _, p := range given {
		files := []string{p}
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			files, _ = filepath.Glob(filepath.Join(p, "*.tools.json"))
		}
		for _, f := range files {
			b, err := receipt.ReadBundle(f)
			if err != nil {
				if !explicit {
					continue // beside the bundles: one that does not read is not the audit's business here
				}
				return nil, fmt.Errorf("--tool-definitions %s: %w", f, err)
			}
			out = append(out, b)
		}
	}
	return out, nil
}
